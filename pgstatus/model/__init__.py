"""
The model both sides share: the published host statuses and views, pure
host selection, and the follower snapshot format.  It imports neither the
polling side (:mod:`pgstatus.monitor.scheduler`) nor the HTTP side (:mod:`pgstatus.http`).
"""

"""
The serving side: everything that answers HTTP (the API and its fast and
slow paths, responses, OpenAPI, metrics, the listener, the follower hub and
fresh-read waiting).  It reads the views that :mod:`pgstatus.monitor.scheduler`
publishes.
"""

"""
The polling side: everything that talks to PostgreSQL and decides host
state (probe and status query, turns and deadlines, the per-host scheduler,
lag arithmetic, host states and the registry that publishes views), and
follower mode's source of state.  It imports nothing of :mod:`pgstatus.http`.
"""

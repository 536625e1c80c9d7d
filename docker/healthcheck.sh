#!/bin/bash
# Container health check: GET /live on the local pg-status HTTP port, in bash
# alone (/dev/tcp), so a check costs about a millisecond of CPU instead of a
# Python interpreter's start. Exit status 0 when /live answers 200, else 1.
# Orchestrators that probe HTTP themselves (Kubernetes probes on /live and
# /ready) don't need this.
port=${pg_status__http_port:-8000}
port=${port//[[:space:]]/}
addr=${pg_status__http_listen_address:-0.0.0.0}
addr=${addr//[[:space:]]/}
case "$addr" in
    "" | "*" | 0.0.0.0) host=127.0.0.1 ;;
    "::" | "[::]") host=::1 ;;
    *) host=${addr#[}; host=${host%]} ;;
esac
exec 3<>"/dev/tcp/$host/${port:-8000}" || exit 1
printf 'GET /live HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&3
IFS=' ' read -r -t 2 _ status _ <&3 || { echo "unhealthy: no answer from /live" >&2; exit 1; }
[ "$status" = 200 ] && exit 0
echo "unhealthy: /live answered ${status:-nothing}" >&2
exit 1

"""
Container health check: GET /live on the local pg-status HTTP port.

Exit status 0 when /live answers 200, 1 otherwise (Docker HEALTHCHECK).
"""

import os
import sys
import urllib.request


def main() -> int:
    """
    Probe /live on the configured port, over loopback where possible.
    """
    port = os.environ.get("pg_status__http_port", "8000").strip() or "8000"
    address = os.environ.get("pg_status__http_listen_address", "0.0.0.0").strip()
    if address in ("", "*", "0.0.0.0"):
        host = "127.0.0.1"
    elif address in ("::", "[::]"):
        host = "[::1]"
    elif ":" in address:
        host = f"[{address.strip('[]')}]"
    else:
        host = address
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/live", timeout=2) as response:
            return 0 if response.status == 200 else 1
    except Exception as e:  # noqa: BLE001 - any failure means unhealthy
        print(f"unhealthy: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

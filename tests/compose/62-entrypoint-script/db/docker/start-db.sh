#!/bin/bash
set -euo pipefail
PGBIN=/usr/lib/postgresql/15/bin
if [ ! -s /var/lib/postgresql/data/PG_VERSION ]; then
  "$PGBIN/initdb" -D /var/lib/postgresql/data
fi
exec "$PGBIN/postgres" -D /var/lib/postgresql/data -p 5433

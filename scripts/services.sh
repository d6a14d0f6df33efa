#!/usr/bin/env bash
# Make sure PostgreSQL and Redis answer on 127.0.0.1, starting them when they do not.
set -uo pipefail
wait_for() {  # name, command
    for _ in $(seq 1 60); do eval "$2" >/dev/null 2>&1 && return 0; sleep 0.5; done
    echo "$1 is not answering" >&2; return 1
}
if ! pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1; then
    echo "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
fi
wait_for PostgreSQL "pg_isready -h 127.0.0.1 -p 5432" || exit 1
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    echo "starting Redis"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
        --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
fi
wait_for Redis "redis-cli -h 127.0.0.1 -p 6379 ping" || exit 1

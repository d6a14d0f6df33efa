#!/usr/bin/env bash
# Make sure PostgreSQL, Redis, MariaDB and RabbitMQ answer on 127.0.0.1, starting them when
# they do not (MariaDB and RabbitMQ serve the matrix cells of scripts/test.sh).
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
# PgBouncer in front of it (R31): transaction pooling on 6432, session pooling on 6433, any
# database by its own name, trust as PostgreSQL's. Run as postgres (it refuses root).
for pgb in transaction:6432 session:6433; do
    mode=${pgb%%:*} port=${pgb##*:} dir=/tmp/durablebeat-pgbouncer-${pgb##*:}
    if ! pg_isready -h 127.0.0.1 -p "$port" >/dev/null 2>&1; then
        echo "starting PgBouncer ($mode pooling, port $port)"
        mkdir -p "$dir" && echo '"postgres" ""' >"$dir/users.txt"
        printf '%s\n' "[databases]" "* = host=127.0.0.1 port=5432" "[pgbouncer]" \
            "listen_addr = 127.0.0.1" "listen_port = $port" "unix_socket_dir =" \
            "auth_type = trust" "auth_file = $dir/users.txt" "pool_mode = $mode" \
            "max_client_conn = 400" "default_pool_size = 20" \
            "ignore_startup_parameters = extra_float_digits,options" \
            "pidfile = $dir/pgbouncer.pid" "logfile = $dir/pgbouncer.log" >"$dir/pgbouncer.ini"
        chown -R postgres "$dir" 2>/dev/null
        /usr/sbin/pgbouncer -d -u postgres "$dir/pgbouncer.ini" || true
    fi
    wait_for "PgBouncer on $port" "pg_isready -h 127.0.0.1 -p $port" || exit 1
done
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    echo "starting Redis"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
        --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
fi
wait_for Redis "redis-cli -h 127.0.0.1 -p 6379 ping" || exit 1
if ! mysqladmin -h 127.0.0.1 -u root ping >/dev/null 2>&1; then
    echo "starting MariaDB"
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql \
        || true
fi
wait_for MariaDB "mysqladmin -h 127.0.0.1 -u root ping" || exit 1
# Django on MariaDB/MySQL converts times with the server's time zone tables (the admin's
# date drill-down in a zone other than UTC): load them once, as Django's docs ask.
if [ "$(mysql -h 127.0.0.1 -u root -N -e 'SELECT COUNT(*) FROM mysql.time_zone_name')" = "0" ]
then
    echo "loading MariaDB's time zone tables"
    mysql_tzinfo_to_sql /usr/share/zoneinfo 2>/dev/null | mysql -h 127.0.0.1 -u root mysql || exit 1
fi
if ! rabbitmq-diagnostics -q ping >/dev/null 2>&1; then
    echo "starting RabbitMQ"
    rabbitmq-server -detached || true
fi
# RabbitMQ takes a while to boot (Erlang): up to a minute
wait_for RabbitMQ "rabbitmq-diagnostics -q ping" || wait_for RabbitMQ "rabbitmq-diagnostics -q ping" \
    || exit 1

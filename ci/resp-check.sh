#!/usr/bin/env bash
# redis-cli against a node's RESP port: AUTH with the root credentials from the
# environment (CAIRN_ROOT_ACCESS_KEY / CAIRN_ROOT_SECRET_KEY), SET/GET/EXISTS/DEL,
# a 32 MiB value (one LMCache chunk of Llama-3.1-8B) by content, and a wrong
# password refused.
#
#   ci/resp-check.sh HOST PORT WORKDIR
set -euo pipefail
host=$1 port=$2 work=$3
fail() { echo "resp-check: FAILED: $*" >&2; exit 1; }
command -v redis-cli >/dev/null || fail "redis-cli missing (apt-get install redis-tools; see ci/install-deps.sh)"
rcli() {
  redis-cli -h "$host" -p "$port" --no-auth-warning \
    --user "$CAIRN_ROOT_ACCESS_KEY" --pass "$CAIRN_ROOT_SECRET_KEY" "$@"
}
[[ $(rcli PING) == PONG ]] || fail "PING"
[[ $(rcli SET resp-check hello) == OK ]] || fail "SET"
[[ $(rcli GET resp-check) == hello ]] || fail "GET"
[[ $(rcli EXISTS resp-check absent resp-check) == 2 ]] || fail "EXISTS"
[[ $(rcli CAIRN.PREFIXLEN resp-check absent) == 1 ]] || fail "CAIRN.PREFIXLEN"
echo "  ok  SET/GET/EXISTS/CAIRN.PREFIXLEN"
head -c $((32 << 20)) /dev/urandom >"$work/resp-32m"
[[ $(rcli -x SET chunk <"$work/resp-32m") == OK ]] || fail "SET 32 MiB"
# Not on a terminal, redis-cli prints the raw value and a newline. Into a file, not
# a pipe: `head` closing the pipe before that newline would kill redis-cli with
# SIGPIPE and fail the check on bytes that were right.
rcli GET chunk >"$work/resp-32m.got" || fail "GET 32 MiB"
[[ $(stat -c %s "$work/resp-32m.got") == $(((32 << 20) + 1)) ]] || fail "32 MiB value's length"
head -c $((32 << 20)) "$work/resp-32m.got" | cmp - "$work/resp-32m" || fail "32 MiB value differs"
[[ $(rcli STRLEN chunk) == $((32 << 20)) ]] || fail "STRLEN"
echo "  ok  32 MiB value by content"
[[ $(rcli DEL resp-check chunk) == 2 ]] || fail "DEL"
[[ -z $(rcli GET resp-check) ]] || fail "GET after DEL"
echo "  ok  DEL"
out=$(redis-cli -h "$host" -p "$port" --no-auth-warning --pass wrong-password GET x 2>&1 || true)
grep -q "WRONGPASS\|NOAUTH" <<<"$out" || fail "wrong password: $out"
echo "  ok  wrong password refused"

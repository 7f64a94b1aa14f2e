# Shell helpers the bench scripts share (sourced, not run).

# Until HOST:PORT accepts a TCP connection, for at most SECONDS; 1 if it never does.
wait_port() { # HOST PORT SECONDS
  local i
  for i in $(seq $(( $3 * 10 ))); do
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

#!/usr/bin/env bash
# A gnomon worker in curl and jq only: the HTTP worker protocol (POST /v1/worker/lease,
# /heartbeat, /complete, /fail). It leases one task at a time from QUEUE, runs COMMAND with
# the task's payload on stdin (and GNOMON_IDEMPOTENCY_KEY, GNOMON_RUN_ID, GNOMON_TASK,
# GNOMON_ATTEMPT in its environment), heartbeats while it runs, and reports exit 0 as
# complete (stdout is the result; stdout and stderr's last 4 KiB the output tail) and any
# other exit as a retryable failure.
#
#   examples/curl-worker.sh [--queue Q] [--max-tasks N] -- COMMAND [ARG...]
#
#   GNOMON_URL         a node's HTTP address (default https://127.0.0.1:7601, `gnomon dev`);
#                      a follower redirects to the leader (307), which curl follows
#   GNOMON_CA          CA file for https (default .gnomon/tls/ca.crt when it exists)
#   GNOMON_TOKEN_FILE  bearer token file (default .gnomon/tls/admin.token when it exists)
#   GNOMON_WORKER_ID   default curl-<host>-<pid>
#
# At-least-once: a task can run again (a lease that expired while the command ran); key its
# effects by GNOMON_IDEMPOTENCY_KEY. The worker stops reporting for a lease whose heartbeat
# answered revoked or cancel.
set -euo pipefail

queue=default max_tasks=0
while [ $# -gt 0 ]; do
  case "$1" in
    --queue) queue=$2; shift 2 ;;
    --max-tasks) max_tasks=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "curl-worker: unknown option $1" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "curl-worker: give the command to run after --" >&2; exit 2; }

url=${GNOMON_URL:-https://127.0.0.1:7601}
worker=${GNOMON_WORKER_ID:-curl-$(hostname)-$$}
ca=${GNOMON_CA:-}; [ -z "$ca" ] && [ -f .gnomon/tls/ca.crt ] && ca=.gnomon/tls/ca.crt
token_file=${GNOMON_TOKEN_FILE:-}
[ -z "$token_file" ] && [ -f .gnomon/tls/admin.token ] && token_file=.gnomon/tls/admin.token
curl_args=(-sS --fail-with-body --location-trusted -X POST -H 'Content-Type: application/json')
[ -n "$ca" ] && curl_args+=(--cacert "$ca")
[ -n "$token_file" ] && curl_args+=(-H "Authorization: Bearer $(cat "$token_file")")

post() {  # post PATH JSON: the answer's JSON on stdout
  printf %s "$2" | curl "${curl_args[@]}" --max-time 40 --data-binary @- "$url/v1/worker/$1"
}

heartbeat_every() {  # heartbeat_every SECONDS LEASE_ID STOPFILE: until STOPFILE exists
  while [ ! -e "$3" ]; do
    sleep "$1"
    [ -e "$3" ] && break
    status=$(post heartbeat "$(jq -nc --arg w "$worker" --arg l "$2" \
      '{workerId: $w, leaseIds: [$l]}')" | jq -r '.leases[0].status') || continue
    if [ "$status" != ok ]; then echo "$status" > "$3.lost"; fi
  done
}

done_tasks=0 work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
while [ "$max_tasks" = 0 ] || [ "$done_tasks" -lt "$max_tasks" ]; do
  answer=$(post lease "$(jq -nc --arg w "$worker" --arg q "$queue" \
    '{workerId: $w, queues: [$q], capacity: 1, waitMs: 20000}')") || { sleep 1; continue; }
  task=$(jq -c '.tasks[0] // empty' <<<"$answer")
  [ -n "$task" ] || continue
  lease_id=$(jq -r .leaseId <<<"$task")
  every=$(jq -r '(.heartbeatIntervalMs | tonumber) / 1000' <<<"$answer")
  rm -f "$work/stop" "$work/stop.lost"
  heartbeat_every "$every" "$lease_id" "$work/stop" &
  beating=$!
  started=$(date +%s%3N)
  set +e
  # A JSON payload is a JSON value (`payload`); other bytes are `payloadBase64`.
  if [ "$(jq 'has("payloadBase64")' <<<"$task")" = true ]; then
    jq -r .payloadBase64 <<<"$task" | base64 -d > "$work/in"
  else
    jq -c '.payload // empty' <<<"$task" > "$work/in"
  fi
  GNOMON_IDEMPOTENCY_KEY=$(jq -r .idempotencyKey <<<"$task") \
    GNOMON_RUN_ID=$(jq -r .runId <<<"$task") GNOMON_TASK=$(jq -r .taskName <<<"$task") \
    GNOMON_ATTEMPT=$(jq -r .attempt <<<"$task") \
    "$@" < "$work/in" > "$work/out" 2> "$work/err"
  code=$?
  set -e
  touch "$work/stop"; wait "$beating" || true
  took=$(( $(date +%s%3N) - started ))
  if [ -e "$work/stop.lost" ]; then
    echo "curl-worker: lease $lease_id $(cat "$work/stop.lost"); not reported" >&2
    continue
  fi
  cat "$work/out" "$work/err" | tail -c 4096 > "$work/tail"  # stdout is also the result
  if [ "$code" = 0 ]; then
    base64 -w0 "$work/out" > "$work/out.b64"  # a file, not an argument: results can be large
    body=$(jq -nc --arg l "$lease_id" --rawfile o "$work/tail" --rawfile r "$work/out.b64" \
      --argjson d "$took" '{leaseId: $l, resultBase64: $r, outputTail: $o, exitCode: 0,
                           durationMs: $d}')
    report=$(post complete "$body")
  else
    body=$(jq -nc --arg l "$lease_id" --rawfile o "$work/tail" --argjson c "$code" \
      --argjson d "$took" '{leaseId: $l, error: "exit \($c)", retryable: true, outputTail: $o,
                           exitCode: $c, durationMs: $d}')
    report=$(post fail "$body")
  fi
  echo "curl-worker: $lease_id exit $code: $(jq -c . <<<"$report")" >&2
  done_tasks=$((done_tasks + 1))
done

#!/usr/bin/env bash
# The chaos run's self-test: each invariant must catch a controller broken on purpose. Every
# variant (crates/controller/src/chaos_break.rs, compiled in through twc-chaos's feature and
# chosen with TWC_CHAOS_BREAK) breaks one invariant; a short run without faults must report
# at least one violation of it. Prints the table variant x invariant; exits non-zero if a
# variant was not caught. About 2 minutes a variant.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hack/provision.sh
cargo build -q --workspace --bins
target="${CARGO_TARGET_DIR:-target}"
results=()
failed=0
for pair in scale-current:I1 drain-early:I2 skip-cleanup:I3 never-promote:I4 \
    stale-credentials:I2 restart-all-at-once:I5; do
  variant=${pair%%:*}
  invariant=${pair##*:}
  # No faults, but for the one a variant breaks under.
  faults=(--fault-every-seconds 100000)
  if [ "$variant" = stale-credentials ]; then
    faults=(--fault-every-seconds 40 --only-fault "client certificates to a new CA")
  fi
  # A pace of 1, so that the two WorkerDeployments' versions restarting at once break it.
  if [ "$variant" = restart-all-at-once ]; then
    faults=(--fault-every-seconds 40 --only-fault "one Secret shared by every WD renewed"
      --restart-pace 1)
  fi
  start=$(date +%s)
  log="$target/chaos-self-test/$variant.log"
  mkdir -p "$(dirname "$log")"
  if TWC_CHAOS_BREAK=$variant "$target/debug/twc-chaos" --rollouts 4 --worker-deployments 2 \
      "${faults[@]}" --converge-seconds 60 --seed "${TWC_CHAOS_SEED:-20261204}" \
      --expect-violation "$invariant" --dir "$target/chaos-self-test/$variant" >"$log" 2>&1; then
    verdict=caught
  else
    verdict="NOT CAUGHT (log: $log)"
    failed=1
  fi
  counts=$(grep -E '^invariant I[1-5]: ' "$log" | sed 's/^invariant \(I[1-5]\): \([0-9]*\).*/\1=\2/' | tr '\n' ' ')
  results+=("$(printf '%-17s %-4s %-8s %4ss  %s' "$variant" "$invariant" "$verdict" "$(($(date +%s) - start))" "$counts")")
done
printf '%-17s %-4s %-8s %5s  %s\n' variant for verdict time "violations by invariant"
printf '%s\n' "${results[@]}"
exit $failed

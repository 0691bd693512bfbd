#!/usr/bin/env bash
# The Debian packages the test suite starts programs from; one list for `make test`, `.ci/run` and
# the gates workflow. Installs what is missing when it can (root, apt-get); otherwise prints one
# line saying what to install and why, and exits 0: the tests that need a missing program skip
# with that reason. Nothing is printed when everything is there.
#   --check    only report what is missing (never install)
#   --strict   fail (exit 1) when a package is still missing afterwards (CI)
set -uo pipefail
mode=install
strict=false
for arg in "$@"; do
  case "$arg" in
    --check) mode=check ;;
    --strict) strict=true ;;
    *) echo "usage: $0 [--check] [--strict]" >&2; exit 2 ;;
  esac
done

have() { command -v "$1" >/dev/null 2>&1; }
have_postgres() { have postgres || compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; }

# package|what needs it; a package is missing when its check fails.
missing() {
  have prometheus && have promtool || echo "prometheus|the Prometheus tests (monitoring, closed loop, native stack)"
  have prometheus-pushgateway || echo "prometheus-pushgateway|the Pushgateway tests (monitoring, closed loop, native stack)"
  have prometheus-node-exporter || echo "prometheus-node-exporter|the textfile alert test (tests/monitoring/test_prometheus_textfile.py)"
  have redis-server || echo "redis-server|the Redis replica test and the native stack"
  have_postgres || echo "postgresql|the native stack test (tests/native_stack/test_stack.py)"
  have java || echo "openjdk-17-jre-headless|the Spark backfill tests (a JVM for pyspark)"
  have chromium || have chromium-browser || echo "chromium|the offline /docs test (headless Chromium)"
}

packages() { missing | cut -d'|' -f1 | tr '\n' ' ' | sed 's/ $//'; }

if [[ -z "$(packages)" ]]; then
  exit 0
fi

if [[ "$mode" == install && "$(id -u)" == 0 ]] && have apt-get; then
  # shellcheck disable=SC2046  # one word per package
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(packages); } >/dev/null; then
    echo "system packages: apt-get could not install $(packages)" >&2
  fi
fi

if [[ -n "$(packages)" ]]; then
  why=$(missing | sed 's/|/ for /' | paste -sd ';' | sed 's/;/; /g')
  echo "system packages missing: ${why}; those tests skip. Install: sudo apt-get install -y $(packages)"
  [[ "$strict" == true ]] && exit 1
fi
exit 0

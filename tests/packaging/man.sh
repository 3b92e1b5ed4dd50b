#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# packaging.man: the man page renders with groff without a warning (-ww), and
# passes `mandoc -T lint` where mandoc is installed (scripts/setup.sh installs it).
# Usage: man.sh PAGE
set -euo pipefail
page=$1

out=$(groff -man -Tutf8 -ww -z "$page" 2>&1) || { echo "$out" >&2; exit 1; }
if [ -n "$out" ]; then
  echo "packaging.man: groff warns:" >&2
  echo "$out" >&2
  exit 1
fi
if command -v mandoc >/dev/null; then
  # -W warning: style notes aside, anything mandoc would warn about fails.
  if ! out=$(mandoc -T lint -W warning "$page" 2>&1) || [ -n "$out" ]; then
    echo "packaging.man: mandoc -T lint:" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "packaging.man: groff -ww and mandoc -T lint are silent"
else
  echo "packaging.man: groff -ww is silent (mandoc not installed, not linted)"
fi

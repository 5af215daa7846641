#!/usr/bin/env bash
# check-tracked-secrets.sh fails when a tracked file outside a testdata/ folder is a data folder's
# secret or database: a private key (PEM), a keyring, a session key, a bbolt database. Tests make
# their own under t.TempDir(); fixtures that must hold such bytes live under testdata/.
# Run by `make check-secrets` (CI). With a git tree-ish argument it checks that commit instead of
# the index (e.g. scripts/check-tracked-secrets.sh HEAD~1), so the check itself can be tried.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
rev=${1:-}

list() {
  if [[ -n $rev ]]; then git ls-tree -r -z --name-only "$rev"; else git ls-files -z; fi
}
show() {
  if [[ -n $rev ]]; then git cat-file blob "$rev:$1"; else cat -- "$1"; fi
}

bad=0
report() { printf '%s: %s\n' "$1" "$2" >&2; bad=1; }
while IFS= read -r -d '' f; do
  case "/$f" in */testdata/*) continue ;; esac
  [[ -z $rev && ! -f $f ]] && continue # deleted in the work tree, not yet in the index
  base=${f##*/}
  case "$base" in
    keyring.json) report "$f" "a keyring (the data folder's master keys)"; continue ;;
    session.key) report "$f" "a session key"; continue ;;
    *.db | *.bolt) report "$f" "a database file"; continue ;;
    *.key) report "$f" "a private key file"; continue ;;
  esac
  # Content: a PEM private key block at the start of a line, or bbolt's meta page magic
  # (0xED0CDAED, little endian, after the 16-byte page header).
  if show "$f" | grep -aqE '^-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY-----'; then
    report "$f" "holds a PEM private key"
  elif [[ $(show "$f" | head -c 20 | tail -c 4 | od -An -tx1 | tr -d ' \n') == "edda0ced" ]]; then
    report "$f" "is a bbolt database"
  elif [[ $base == *.json ]] && show "$f" | grep -aq '"material"'; then
    report "$f" "looks like a keyring (key material)"
  fi
done < <(list)
if ((bad)); then
  echo "tracked secrets or data files (above): remove them (git rm --cached), keep data folders out with .gitignore, put real fixtures under testdata/" >&2
  exit 1
fi
echo "no tracked private key, keyring, session key or database outside testdata/"

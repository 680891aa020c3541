#!/usr/bin/env bash
# Fails when a tracked text file names an absolute path of somebody's machine: anything under
# a home or work directory (the top-level directories work, home, root, check and Users), or
# the rig's former place beside the repository (a "shared" directory holding "interop"). The
# repository must be whole on its own: scripts and tests find the siw rig (interop/siw-vm)
# and captures (interop/pcaps) relative to the checkout. System paths (/var/tmp, /tmp, /dev,
# /usr, /etc, /sys, /proc, /run) are allowed. A path counts as absolute when its first slash
# starts the word: "a/work/b" and "${X}/work/" are relative; after a space, a quote, a
# parenthesis, "=" or ":" it is absolute. (The names are never spelled as paths in this
# file, so it does not match itself.)
#
#   scripts/check-paths.sh           # the checkout this script lives in
#   scripts/check-paths.sh DIR       # the git work tree at DIR (the tests plant files there)
#
# Prints every offending line as FILE:LINE: TEXT and exits 1; exits 0 when there is none,
# 2 when DIR is not the top directory of a git work tree.
set -uo pipefail

dir=${1:-$(dirname "$0")/..}
cd "$dir" || exit 2
top=$(git rev-parse --show-toplevel 2>/dev/null)
[ -n "$top" ] && [ "$top" = "$(pwd -P)" ] || {
    echo "check-paths: $dir is not the top of a git work tree (the check reads git ls-files)" >&2
    exit 2
}

homes='work|home|root|check|Users'
abs="(^|[^A-Za-z0-9_.~\$}/-])/($homes)/"
outside="shared""/interop"

# -I skips binary files (the captures); -n names the line; -E for the alternations. grep's
# status 1 (no line matched) is the good case; 2 (a file it could not read, e.g. one deleted
# but still tracked) fails the check: xargs folds every status into 123, so each batch maps
# its grep's 2 to 255, which makes xargs stop and exit 124.
hits=$(git ls-files -z | xargs -0 -r sh -c '
    a=$0 o=$1
    shift
    grep -HnIE -e "$a" -e "$o" -- "$@"
    rc=$?
    [ "$rc" -le 1 ] || exit 255' "$abs" "$outside")
rc=$?
if ((rc != 0 && rc != 123)); then
    echo "check-paths: FAILED: could not read every tracked file (xargs/grep exit $rc, messages above)" >&2
    exit 1
fi
if [ -n "$hits" ]; then
    echo "$hits"
    echo "check-paths: FAILED: $(echo "$hits" | wc -l) line(s) above name a machine path; use a path relative to the checkout" >&2
    exit 1
fi
echo "check-paths: ok: $(git ls-files | wc -l) tracked files, no machine path"

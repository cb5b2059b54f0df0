#!/usr/bin/env bash
# Shell completion, as a user loads it: `source <(sandboxio completion bash)` and then the shell's
# own completion machinery. bash and fish are driven for real (the completion function with
# COMP_WORDS, fish's `complete -C`); zsh's script is parsed and registered with compinit.
#   completion_test.sh SANDBOXIO
set -uo pipefail
cli=$1
failed=0
expect() {  # expect WHAT GOT WANT
  if [ "$2" = "$3" ]; then echo "ok: $1 -> $2"; else echo "FAIL: $1 -> '$2', want '$3'" >&2; failed=1; fi
}
bash_complete() {  # bash_complete WORD... (the last word is the one being completed)
  bash -c 'source <("$0" completion bash) || exit 1
           COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
           _sandboxio 2>/dev/null; echo "${COMPREPLY[*]}"' "$cli" "$@"
}
expect "bash: sandboxio d" "$(bash_complete sandboxio d)" "demo doctor"
expect "bash: sbx d" "$(bash_complete sbx d)" "demo doctor"
expect "bash: sandboxio routing c" "$(bash_complete sandboxio routing c)" "check"
expect "bash: sandboxio run --ti" "$(bash_complete sandboxio run --ti)" "--timeout"
expect "bash: sandboxio run --backend d" "$(bash_complete sandboxio run --backend d)" "docker://"
expect "bash: sandboxio completion z" "$(bash_complete sandboxio completion z)" "zsh"
expect "bash: after --, nothing of ours" "$(bash_complete sandboxio run -- d)" ""
expect "bash: complete is registered" \
  "$(bash -c 'source <("$0" completion bash); complete -p sandboxio sbx | wc -l' "$cli")" "2"

if command -v fish >/dev/null; then
  fish_complete() { fish -c 'sandboxio completion fish | source; complete -C "$argv[1]"' "$1" | cut -f1 | tr '\n' ' ' | sed 's/ $//'; }
  export PATH="$(dirname "$cli"):$PATH"
  expect "fish: sandboxio d" "$(fish_complete 'sandboxio d')" "demo doctor"
  expect "fish: sandboxio routing " "$(fish_complete 'sandboxio routing ')" "check"
  expect "fish: sandboxio reap --k" "$(fish_complete 'sandboxio reap --k')" "--kill"
else
  echo "FAIL: fish is not installed (scripts/deps.sh installs it)" >&2; failed=1
fi
if command -v zsh >/dev/null; then
  "$cli" completion zsh | zsh -n || { echo "FAIL: zsh script does not parse" >&2; failed=1; }
  expect "zsh: registered for sandboxio and sbx" \
    "$(zsh -c 'autoload -U compinit; compinit -u -D; source <("$0" completion zsh); print -- $_comps[sandboxio] $_comps[sbx]' "$cli")" \
    "_sandboxio _sandboxio"
else
  echo "FAIL: zsh is not installed (scripts/deps.sh installs it)" >&2; failed=1
fi
# A shell that is not one of the three is a usage error.
"$cli" completion tcsh >/dev/null 2>&1; expect "tcsh is refused (usage, 2)" "$?" "2"
exit $failed

#!/usr/bin/env bash
# The habits the tree keeps, checked: clang-format (.clang-format files),
# clang-tidy (.clang-tidy) and shellcheck at warning level (.shellcheckrc).
#
#   scripts/lint.sh [--format] [--tidy] [--shell] [--fix]
#
# With no part named, all three run. --fix rewrites the files clang-format
# would change instead of reporting them (the other parts only report).
# Exit 0: clean; 1: a finding (each printed with file and line); 77: a tool
# is missing, or (--tidy) the build has no compile_commands.json yet.
# --tidy reads $RBIO_BUILD_DIR/compile_commands.json (default build/) and
# runs $RBIO_LINT_JOBS clang-tidy (and shellcheck) processes at a time
# (default 2).
# The C/C++ files are the ones git tracks, plus new ones it does not ignore,
# so nothing fetched into .cache/ or generated into the build is checked.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${RBIO_BUILD_DIR:-$ROOT/build}"
JOBS="${RBIO_LINT_JOBS:-2}"
# The C file of fio's engine ABI is written in tgt's kernel style, like the
# tgt glue, but lives beside C++: it takes the glue's style file.
KERNEL_STYLE_FILES=(initiator/fio/rbio_fio.c)

log() { printf 'lint: %s\n' "$*" >&2; }

# tool NAME: the path of NAME-14, or of NAME if that is version 14 (other
# versions format and diagnose differently); empty if neither.
tool() {
  if command -v "$1-14" >/dev/null; then command -v "$1-14"
  elif command -v "$1" >/dev/null && "$1" --version | grep -q 'version 14\.'; then command -v "$1"
  fi
}

tracked() { git -C "$ROOT" ls-files --cached --others --exclude-standard -- "$@"; }

c_sources() { tracked '*.c' '*.h' '*.cpp' '*.hpp'; }

# Every shell script: *.sh, and any other file whose first line runs a shell.
shell_scripts() {
  local f first
  while IFS= read -r f; do
    [[ -f $ROOT/$f ]] || continue
    if [[ $f == *.sh ]]; then echo "$f"; continue; fi
    IFS= read -r first < "$ROOT/$f" || continue
    [[ $first =~ ^#!.*(/|env\ )(ba)?sh( |$) ]] && echo "$f"
  done < <(tracked)
}

is_kernel_style() {
  local k
  for k in "${KERNEL_STYLE_FILES[@]}"; do [[ $1 == "$k" ]] && return 0; done
  return 1
}

check_format() {
  local cf f rc=0 style
  cf=$(tool clang-format)
  [[ -n $cf ]] || { log "clang-format 14 not found (Debian: clang-format)"; return 77; }
  cd "$ROOT"
  # A list read through a process substitution hides git's failure (not a
  # checkout, "dubious ownership"): none to check is a failure, not clean.
  local files
  files=$(c_sources) || { log "clang-format: git cannot list the sources"; return 1; }
  [[ -n $files ]] || { log "clang-format: no C or C++ source found"; return 1; }
  while IFS= read -r f; do
    style="file"
    is_kernel_style "$f" && style=file:tgt-backend/glue/.clang-format
    if [[ ${FIX:-0} == 1 ]]; then
      "$cf" --style="$style" -i "$f"
    elif ! "$cf" --style="$style" --dry-run --Werror "$f"; then
      rc=1
    fi
  done <<< "$files"
  (( rc == 0 )) || log "clang-format: files differ from their .clang-format style; fix with: scripts/lint.sh --format --fix"
  return "$rc"
}

check_tidy() {
  local ct
  ct=$(tool clang-tidy)
  [[ -n $ct ]] || { log "clang-tidy 14 not found (Debian: clang-tidy)"; return 77; }
  [[ -f $BUILD/compile_commands.json ]] || { log "no $BUILD/compile_commands.json: configure the build first"; return 77; }
  # The translation units the build compiles that are rbio's own files.
  local -a units
  mapfile -t units < <(python3 - "$BUILD/compile_commands.json" "$ROOT" <(c_sources) <<'EOF'
import json, os, sys
db, root, own = sys.argv[1], sys.argv[2], sys.argv[3]
own = {os.path.join(root, l.strip()) for l in open(own) if l.strip()}
seen = set()
for e in json.load(open(db)):
    f = os.path.normpath(os.path.join(e["directory"], e["file"]))
    if f in own and f not in seen:
        seen.add(f)
        print(f)
EOF
)
  (( ${#units[@]} > 0 )) || { log "clang-tidy: no rbio source in $BUILD/compile_commands.json"; return 1; }
  log "clang-tidy: ${#units[@]} translation units, $JOBS at a time"
  # A finding is an error (WarningsAsErrors in .clang-tidy): clang-tidy exits
  # nonzero, and so does xargs (123) when any of its runs did.
  # -Wno-deprecated-enum-enum-conversion: rdma-core's ibv_reg_mr() macro
  # mixes two of its enums, which clang (not g++, rbio's compiler) warns
  # about in C++20; .clang-tidy's Checks cannot turn a compiler warning off.
  # -Wno-ignored-optimization-argument: the build's GCC link-time
  # optimisation flags (RBIO_LTO: -fno-fat-lto-objects), which clang does
  # not take; they change the link, not the code tidy reads.
  if ! printf '%s\0' "${units[@]}" | xargs -0 -n 4 -P "$JOBS" "$ct" -p "$BUILD" --quiet \
      --extra-arg=-Wno-deprecated-enum-enum-conversion \
      --extra-arg=-Wno-ignored-optimization-argument; then
    log "clang-tidy: findings above"
    return 1
  fi
}

check_shell() {
  command -v shellcheck >/dev/null || { log "shellcheck not found (Debian: shellcheck)"; return 77; }
  local -a scripts
  mapfile -t scripts < <(shell_scripts)
  log "shellcheck: ${#scripts[@]} scripts"
  cd "$ROOT"
  # A script with a #! line is meant to be run as a command (the docs do):
  # on a fresh clone it only runs if git has it executable.
  local f first not_exec=0
  for f in "${scripts[@]}"; do
    IFS= read -r first < "$f" || continue
    [[ $first == '#!'* ]] || continue
    if [[ $(git ls-files -s -- "$f" | cut -d' ' -f1) != 100755 ]]; then
      log "$f: has a #! line but is not executable in git (git update-index --chmod=+x)"
      not_exec=1
    fi
  done
  (( not_exec == 0 )) || return 1
  # In parallel, like clang-tidy; xargs exits nonzero if any run did.
  printf '%s\0' "${scripts[@]}" | xargs -0 -n 8 -P "$JOBS" shellcheck -S warning \
    || { log "shellcheck: findings above"; return 1; }
}

parts=()
FIX=0
for a in "$@"; do
  case $a in
    --format) parts+=(format) ;;
    --tidy) parts+=(tidy) ;;
    --shell) parts+=(shell) ;;
    --fix) FIX=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) log "unknown argument '$a' (see --help)"; exit 2 ;;
  esac
done
(( ${#parts[@]} > 0 )) || parts=(format tidy shell)

worst=0
for p in "${parts[@]}"; do
  rc=0
  start=$SECONDS
  "check_$p" || rc=$?
  case $rc in 0) result=clean ;; 77) result=skipped ;; *) result=FAILED ;; esac
  log "$p: $result ($((SECONDS - start)) s)"
  # A finding outweighs a skip: 1 beats 77, 77 beats 0.
  if (( rc == 1 || (rc != 0 && rc != 77) )); then worst=1
  elif (( rc == 77 && worst == 0 )); then worst=77
  fi
done
exit "$worst"

# shellcheck shell=bash
# Callgrind profiles of tgtd, read per SCSI command (sourced by
# bench/iser-instructions.sh and bench/tcp-instructions.sh, after lib.sh;
# they write $WORK/rows.md and $WORK/top.md).

# calls_of FILE REGEX: calls made to the functions whose names match REGEX
# in a callgrind profile (names are compressed: "(N) name" the first time,
# "(N)" after).
calls_of() {
  awk -v re="^($2)\$" '
    match($0, /^c?fn=\([0-9]+\)/) {
      id = substr($0, 1, RLENGTH); sub(/^c?fn=/, "", id)
      if (length($0) > RLENGTH + 1) name[id] = substr($0, RLENGTH + 2)
      want = $0 ~ /^cfn=/ && name[id] ~ re; next }
    want && /^calls=/ { split($1, a, "="); n += a[2] }
    { want = 0 }
    END { print n + 0 }' "$1"
}

# self_by_object FILE: "OBJECT INSTRUCTIONS" lines, each object's own
# instructions (a cost line right after calls= is the call's inclusive
# cost, not the caller's own).
self_by_object() {
  awk '
    match($0, /^ob=\([0-9]+\)/) {
      id = substr($0, 4, RLENGTH - 3)
      if (length($0) > RLENGTH + 1) obname[id] = substr($0, RLENGTH + 2)
      ob = obname[id]; next }
    match($0, /^cob=\([0-9]+\)/) {
      id = substr($0, 5, RLENGTH - 4)
      if (length($0) > RLENGTH + 1) obname[id] = substr($0, RLENGTH + 2)
      next }
    /^calls=/ { call = 1; next }
    /^[-+*0-9]/ { if (call) call = 0; else self[ob] += $2; next }
    END { for (o in self) { n = o; sub(/.*\//, "", n); print n, self[o] } }' "$1"
}

# self_of FILE REGEX: own instructions of the functions whose names match
# REGEX (as in calls_of), all objects.
self_of() {
  awk -v re="^($2)\$" '
    match($0, /^c?fn=\([0-9]+\)/) {
      id = substr($0, 1, RLENGTH); sub(/^c?fn=/, "", id)
      if (length($0) > RLENGTH + 1) name[id] = substr($0, RLENGTH + 2)
      if ($0 ~ /^fn=/) mine = name[id] ~ re
      next }
    /^calls=/ { call = 1; next }
    /^[-+*0-9]/ { if (call) call = 0; else if (mine) n += $2; next }
    END { print n + 0 }' "$1"
}

# The copy functions of glibc (memcpy, memmove, mempcpy and their
# per-CPU variants such as __memmove_avx_unaligned_erms). A copy of 4 KiB
# takes at least 256 instructions in any of them (32-byte moves, or one
# counted per byte of a rep movsb under valgrind).
COPY_FNS='(__)?(memcpy|memmove|mempcpy)(_[a-z0-9_]+)?(@[^ ]*)?'
# Every way to allocation that rbio or tgt takes: malloc and friends (an
# unaligned operator new calls malloc), aligned allocation (an aligned
# operator new calls aligned_alloc; the TCP block pool's misses call
# posix_memalign) and mmap (the iSER block pool's misses).
ALLOC_FNS='(malloc|calloc|realloc|posix_memalign|aligned_alloc|memalign|valloc|mmap|mmap64)(@[^ ]*)?'

# summarise CONFIG NAME FILE: one results row (in $WORK/rows.md: commands,
# instructions per command in all and per object: tgtd, bs_rbio.so, libc,
# librxe, the rest; allocations (ALLOC_FNS) per command; memcpy/memmove calls and their own
# instructions per command: copies are counted, not their bytes, which
# callgrind does not see) and the top functions
# ($WORK/top.md). Commands are the calls of tgt's target_cmd_queue(), which
# every SCSI command passes once whatever the transport and store.
summarise() {
  local c=$1 name=$2 f=$3 cmds allocs copies copy_ir
  cmds=$(calls_of "$f" target_cmd_queue)
  (( cmds > 0 )) || die "$c $name: no command in the profile ($f)"
  allocs=$(calls_of "$f" "$ALLOC_FNS")
  copies=$(calls_of "$f" "$COPY_FNS")
  copy_ir=$(self_of "$f" "$COPY_FNS")
  self_by_object "$f" | awk -v c="$c" -v name="$name" -v cmds="$cmds" -v allocs="$allocs" \
      -v copies="$copies" -v copy_ir="$copy_ir" '
    { total += $2; o = $1
      if (o ~ /^libc\.so/) o = "libc"; else if (o ~ /^librxe/) o = "librxe"
      else if (o != "tgtd" && o != "bs_rbio.so") o = "other"
      by[o] += $2 }
    END { printf "| %s | %s | %d | **%.0f** | %.0f | %.0f | %.0f | %.0f | %.0f | %.3f | %.3f | %.0f |\n", name, c, cmds, total / cmds,
            by["tgtd"] / cmds, by["bs_rbio.so"] / cmds, by["libc"] / cmds, by["librxe"] / cmds, by["other"] / cmds,
            allocs / cmds, copies / cmds, copy_ir / cmds }' >> "$WORK/rows.md"
  {
    printf '\n%s on %s: the 12 costliest functions (own instructions per command)\n\n' "$name" "$c"
    callgrind_annotate "$f" 2>/dev/null | awk -v cmds="$cmds" '
      /file:function/ { body = 1; next }
      body && $1 ~ /^[0-9,]+$/ && n < 12 {
        ir = $1; gsub(",", "", ir); line = $0
        sub(/^ *[0-9,]+ +\( *[0-9.]+%\) +/, "", line); sub(/^[^:]*:/, "", line)
        if (match(line, / \[[^]]*\]$/)) { ob = substr(line, RSTART + 2, RLENGTH - 3); sub(/.*\//, "", ob)
                                          line = substr(line, 1, RSTART - 1) " (" ob ")" }
        printf "    %7.1f  %s\n", ir / cmds, substr(line, 1, 120); n++ }'
  } >> "$WORK/top.md"
}


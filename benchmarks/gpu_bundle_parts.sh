#!/bin/bash
# Runs on the CPU machine, from the project root, before a lease: cuts the staged bundle (.gpu-bundle/pK/part.KK,
# made by ../shared/gpu/make-bundle.sh) again into parts that fit one device call each. A call carries the tree
# (tracked files, and untracked ones git does not ignore) as well as the paths named in `carry`, at most 64 MiB in
# all (/work/.library/device/README.md): on 2026-12-03 the tree was 25 MB and make-bundle's 40-MiB parts were
# refused. Part size: 64 MiB - the tree - 3 MiB, in whole MiB (or MIB, the first argument). The bundle's checksum
# (SHA256) is checked first, and the new parts replace the old ones only once they are all written; stage.sh is
# unchanged (it concatenates /root/stage/part.* in name order).
#   bash benchmarks/gpu_bundle_parts.sh [MIB]     # prints "N parts of M MiB": stage with `stage.sh N`
# It says whether the last part fits the first work call beside the checkpoint and the clips (else stage it alone).
set -euo pipefail
B=.gpu-bundle
[ -f "$B/p0/stage.sh" ] && [ -f "$B/p0/SHA256" ] \
  || { echo "gpu_bundle_parts: no bundle in $B (make-bundle first)"; exit 2; }
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s \
  | awk '{s += $1} END {print s + 0}')
mib=${1:-$(( (64 * 1048576 - tree) / 1048576 - 3 ))}
[ "$mib" -ge 1 ] 2>/dev/null \
  || { echo "gpu_bundle_parts: no room for a part ($mib MiB; the tracked tree: $tree bytes)"; exit 3; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# The parts in number order (part.00, part.01, ...: the names sort as numbers, the folders p10, p2 would not).
find "$B" -name 'part.*' -printf '%f %p\n' | sort | cut -d' ' -f2- | xargs cat > "$tmp/bundle.tar"
echo "$(cat "$B/p0/SHA256")  $tmp/bundle.tar" | sha256sum -c --quiet - \
  || { echo "gpu_bundle_parts: the parts do not make the bundle (checksum)"; exit 4; }
cp "$B/p0/stage.sh" "$B/p0/SHA256" "$tmp/"
(cd "$tmp" && split -b "${mib}M" -d -a 2 bundle.tar part.)
mkdir "$tmp/new"
n=0
for f in "$tmp"/part.*; do
  k=$((10#${f##*.})); mkdir "$tmp/new/p$k"; mv "$f" "$tmp/new/p$k/"; cp "$tmp/stage.sh" "$tmp/SHA256" "$tmp/new/p$k/"
  n=$((n + 1))
done
rm "$tmp/bundle.tar"; mv "$B" "$tmp/old"; mv "$tmp/new" "$B"  # the old parts go only once the new ones are whole
echo "$n parts of $mib MiB (the tree: $(( tree / 1048576 )) MiB): bash .gpu-bundle/pK/stage.sh $n"
# Can the last part go with the first work call, beside the checkpoint and the clips?
last=$(stat -c %s "$B/p$((n - 1))"/part.*)
extra=0
for d in checkpoints/cosmos-reason1-7b-dummy .gpu-clips; do
  [ -e "$d" ] && extra=$(( extra + $(du -sb "$d" | cut -f1) ))
done
if [ $(( tree + last + extra )) -le $(( 64 * 1048576 )) ]; then
  echo "the last part ($(( last / 1048576 )) MiB) fits the first work call with the checkpoint and clips"
else
  echo "the last part ($(( last / 1048576 )) MiB) does not fit beside the checkpoint and clips: stage it alone"
fi

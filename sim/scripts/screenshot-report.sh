#!/usr/bin/env bash
# Renders a run report page (from `simulate --report DIR`) in headless Chromium, saves a
# screenshot and checks that it is not blank: the page must paint many colours and a real share
# of non-white pixels, including the violation red when the run failed.
#
#   sim/scripts/screenshot-report.sh report/seed-3.html seed-3.png
#
# Needs Debian's chromium (`apt-get install chromium`). Exit 0 when the screenshot shows the
# page, 1 when it is blank or Chromium failed.
set -euo pipefail

page=${1:?usage: screenshot-report.sh PAGE.html OUT.png}
out=${2:?usage: screenshot-report.sh PAGE.html OUT.png}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [[ -z $browser ]]; then
  echo "no chromium found: apt-get install chromium" >&2
  exit 1
fi
abs=$(cd "$(dirname "$page")" && pwd)/$(basename "$page")
rm -f "$out"
# A fresh profile each time; no GPU, no sandbox (containers), a tall window for the whole page.
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
  --window-size=1300,2600 --screenshot="$out" "file://$abs" >/dev/null 2>&1 || true
if [[ ! -s $out ]]; then
  echo "chromium wrote no screenshot for $page" >&2
  exit 1
fi
python3 - "$out" "$page" <<'PY'
import struct, sys, zlib

path, page = sys.argv[1], sys.argv[2]
data = open(path, "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, width = 8, b"", 0
while pos < len(data):
    (length,) = struct.unpack(">I", data[pos:pos + 4])
    kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
    if kind == b"IHDR":
        width, height, depth, colour = struct.unpack(">IIBB", body[:10])
        assert depth == 8 and colour in (2, 6), f"unexpected PNG format {depth}/{colour}"
        bpp = 3 if colour == 2 else 4
    elif kind == b"IDAT":
        idat += body
    pos += 12 + length
raw, stride = zlib.decompress(idat), width * bpp
rows, prev, i = [], bytearray(stride), 0
for _ in range(height):
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
    i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b, c = prev[x], prev[x - bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(bytes(line))
    prev = line
colours, ink, red = set(), 0, 0
for line in rows:
    for x in range(0, stride, bpp):
        r, g, b = line[x], line[x + 1], line[x + 2]
        colours.add((r >> 3, g >> 3, b >> 3))
        if (r, g, b) != (255, 255, 255):
            ink += 1
        if r > 170 and g < 90 and b < 90:
            red += 1
share = ink / (width * height)
failing = 'class="verdict fail"' in open(page, encoding="utf-8").read()
print(f"{path}: {width}x{height}, {len(colours)} colours, {share:.1%} non-white, {red} violation-red pixels")
if len(colours) < 16 or share < 0.03:
    sys.exit(f"{path} looks blank")
if failing and red < 50:
    sys.exit(f"{path}: the page is a failing run but no violation is drawn in red")
PY

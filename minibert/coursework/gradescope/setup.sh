#!/usr/bin/env bash
# Gradescope runs this once, when it builds the autograder's image, from the
# folder the autograder archive was unpacked into (/autograder/source).
# It installs what grading needs and NOT minibert itself: the instructor's
# package stays out of site-packages, so no submission can import it.
# bubblewrap is the jail every submission runs in (docs/coursework.md).
set -euo pipefail
cd "$(dirname "$0")"
apt-get install -y bubblewrap || { apt-get update && apt-get install -y bubblewrap; }
grep -v '^-e' requirements.txt > grading-requirements.txt     # torch, numpy, tokenizers, tqdm, ...
${PIP:-pip3} install -r grading-requirements.txt pytest

#!/bin/sh
set -e
python -m pytest -q tests/

# shellcheck shell=bash
# What this connector's tests need from a registry, sourced by scripts/install-deps.sh
# (after the Debian packages; $root is the repository).
# moto's S3 server, in a venv of its own, pinned by tests/servers/python/requirements.txt;
# pip only when that file changed since the last install.
py_dir="$root/tests/servers/python"
if ! cmp -s "$py_dir/requirements.txt" "$py_dir/venv/.kayak-requirements.txt" 2>/dev/null; then
  echo "install-deps: moto from PyPI into tests/servers/python/venv"
  rm -rf "$py_dir/venv"
  python3 -m venv "$py_dir/venv"
  "$py_dir/venv/bin/pip" install -q --disable-pip-version-check -r "$py_dir/requirements.txt"
  cp "$py_dir/requirements.txt" "$py_dir/venv/.kayak-requirements.txt"
fi


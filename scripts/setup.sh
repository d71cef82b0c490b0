#!/usr/bin/env bash
# Installs the Debian packages flowlane needs, only those that are missing.
# Runs apt-get as root, or through sudo when not root. Safe to run again and again.
#
#   scripts/setup.sh            # install what is missing
#   scripts/setup.sh openmp     # also the OpenMP comparison's tools (bench-openmp.sh,
#                               # callgrind-submit.sh): clang, libomp-dev, valgrind
#   FLOWLANE_SKIP_SETUP=1 ...   # (in demo.sh/test.sh) do not touch packages at all
set -euo pipefail

# Needed to build and test the library.
required=(cmake g++ make pkg-config binutils libgtest-dev libgmock-dev libbenchmark-dev
          libconcurrentqueue-dev python3)
# Benchmark peers and binding toolchains: installed when the distribution has them;
# the build and the tests work without them (their parts are skipped). The binding
# generator's check (scripts/dev/gen-bindings.sh --check: python3-pycparser, bindgen,
# rustfmt), mypy and rust-clippy are what CI's bindings-check stage needs; python3-venv,
# -build, -wheel, -setuptools the wheel test; python3-numpy the NumPy example and tests;
# Open MPI (libopenmpi-dev, openmpi-bin) the MPI plugin libflowlane_mpi.so and its tests
# under mpirun, python3-mpi4py its Python example.
optional=(libtbb-dev libstarpu-dev python3-pytest cargo
          python3-pycparser bindgen rustfmt mypy rust-clippy
          python3-venv python3-build python3-wheel python3-setuptools python3-numpy
          libopenmpi-dev openmpi-bin python3-mpi4py)
for group in "$@"; do
  case "$group" in
    # bench_openmp_libomp (clang++ -fopenmp=libomp) and scripts/dev/callgrind-submit.sh;
    # libgomp comes with g++.
    openmp) optional+=(clang libomp-dev valgrind) ;;
    *) echo "setup.sh: unknown package group '$group' (known: openmp)" >&2; exit 2 ;;
  esac
done

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "setup.sh: this is not a Debian/Ubuntu system (no dpkg/apt-get)." >&2
  echo "setup.sh: install these yourself: ${required[*]} (optional: ${optional[*]})" >&2
  exit 1
fi

is_installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]
}

missing_required=()
missing_optional=()
for p in "${required[@]}"; do is_installed "$p" || missing_required+=("$p"); done
for p in "${optional[@]}"; do is_installed "$p" || missing_optional+=("$p"); done

if [[ ${#missing_required[@]} -eq 0 && ${#missing_optional[@]} -eq 0 ]]; then
  echo "setup.sh: all packages present"
  exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "setup.sh: missing packages: ${missing_required[*]} ${missing_optional[*]}" >&2
  echo "setup.sh: not root and no sudo; run as root: apt-get install ${missing_required[*]} ${missing_optional[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt_install() {
  "${as_root[@]}" apt-get install -y --no-install-recommends "$@" </dev/null
}

echo "setup.sh: installing: ${missing_required[*]} ${missing_optional[*]}"
"${as_root[@]}" apt-get update -qq </dev/null

# Optional packages only when this distribution has an installable candidate.
available_optional=()
for p in "${missing_optional[@]}"; do
  cand=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [[ -n "$cand" && "$cand" != "(none)" ]]; then
    available_optional+=("$p")
  else
    echo "setup.sh: optional package $p is not available here; skipping it"
  fi
done

if [[ ${#missing_required[@]} -gt 0 ]]; then
  apt_install "${missing_required[@]}"
fi
if [[ ${#available_optional[@]} -gt 0 ]]; then
  if ! apt_install "${available_optional[@]}"; then
    echo "setup.sh: warning: could not install some optional packages (${available_optional[*]}); continuing" >&2
  fi
fi
echo "setup.sh: done"

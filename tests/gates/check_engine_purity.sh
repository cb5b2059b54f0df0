#!/usr/bin/env bash
# Gate: the engine and every backend machine do no I/O and have no global constructors.
#   check_engine_purity.sh [--config HEADER]... ARCHIVE_OR_OBJECT...
# Fails (exit 1) when any object references a socket, file, clock, thread, environment or
# randomness symbol, or carries a static initialiser (.init_array / .ctors section or a
# _GLOBAL__sub_I_ function). A symbol check cannot see I/O hidden behind a callback (a
# std::function in a machine's Config that reads the clock where the config is made), so each
# --config HEADER is read too: its `struct Config` must hold values only, no std::function,
# function pointer or function reference. Time and liveness reach a machine as inputs.
set -euo pipefail
configs=()
objects=()
while [ $# -gt 0 ]; do
  case "$1" in
    --config) configs+=("${2:?--config needs a header}"); shift 2 ;;
    *) IFS=';' read -ra listed <<<"$1"; objects+=("${listed[@]}"); shift ;;  # CMake lists
  esac
done
[ "${#objects[@]}" -gt 0 ] || [ "${#configs[@]}" -gt 0 ] ||
  { echo "usage: check_engine_purity.sh [--config HEADER]... ARCHIVE_OR_OBJECT..." >&2; exit 1; }
fail=0
for header in "${configs[@]}"; do
  [ -f "$header" ] || { echo "no such header: $header" >&2; exit 1; }
  # The body of `struct Config { ... };`, comments removed.
  body=$(awk '/^struct Config[ {]/ {on=1} on {print} on && /^};/ {exit}' "$header" | sed 's://.*$::')
  [ -n "$body" ] || { echo "PURITY: $header has no struct Config" >&2; fail=1; continue; }
  hits=$(grep -nE 'std::function|function_ref|\(\*[A-Za-z_]*\)\(|\(&[A-Za-z_]*\)\(' <<<"$body" || true)
  if [ -n "$hits" ]; then
    echo "PURITY: a callback in the machine Config of $header (time and liveness must be inputs):" >&2
    echo "$hits" >&2
    fail=1
  fi
done
[ "${#objects[@]}" -gt 0 ] || { [ "$fail" -eq 0 ] && echo "config purity passed" && exit 0; exit 1; }
for archive in "${objects[@]}"; do
  [ -f "$archive" ] || { echo "no such archive: $archive" >&2; exit 1; }
done

# C-level symbols, matched exactly against the undefined symbols of the archive.
deny_exact=(
  socket socketpair connect accept accept4 bind listen shutdown getaddrinfo gethostbyname
  send sendto sendmsg recv recvfrom recvmsg read write pread pwrite readv writev
  open open64 openat creat fopen fopen64 freopen fdopen fread fwrite fprintf printf vfprintf
  puts fputs putchar fputc fgets fflush close unlink stat fstat lstat mkdir opendir readdir
  poll ppoll select pselect epoll_create epoll_create1 epoll_ctl epoll_wait ioctl fcntl
  clock_gettime gettimeofday time clock ftime localtime gmtime localtime_r gmtime_r
  sleep usleep nanosleep
  pthread_create pthread_mutex_lock pthread_cond_wait thrd_create
  getrandom getentropy rand srand random srandom arc4random rand_r drand48
  getenv secure_getenv setenv putenv environ fork vfork execve execvp system popen kill
  stdout stderr stdin
)
# C++ symbols, matched as substrings of the mangled names.
deny_mangled=(
  '_ZNSt6chrono3_V212system_clock3now'   # std::chrono::system_clock::now
  '_ZNSt6chrono3_V212steady_clock3now'   # std::chrono::steady_clock::now
  '_ZNSt13random_device'                 # std::random_device
  '_ZNSt6thread'                         # std::thread
  '_ZSt4cout' '_ZSt4cerr' '_ZSt4clog' '_ZSt3cin'
  'basic_filebuf' 'basic_ifstream' 'basic_ofstream' 'basic_fstream'
  '_ZNSt10filesystem' '_ZNSt3__110filesystem'
)

undefined=$(nm -u "${objects[@]}" 2>/dev/null | awk 'NF==2 {print $2}' | sort -u)
for sym in "${deny_exact[@]}"; do
  for variant in "$sym" "${sym}64" "__${sym}" "__${sym}_chk" "${sym}@GLIBC"; do
    if grep -qx -- "$variant" <<<"$undefined"; then
      where=$(nm -A -u "${objects[@]}" | awk -v s="$variant" '$NF==s {print $1}' | sed 's/:$//' | tr '\n' ' ')
      echo "PURITY: the engine references '$variant' (in $where)" >&2
      fail=1
    fi
  done
done
for pat in "${deny_mangled[@]}"; do
  hits=$(grep -F -- "$pat" <<<"$undefined" || true)
  if [ -n "$hits" ]; then
    echo "PURITY: the engine references $(c++filt <<<"$hits" | head -3 | tr '\n' ';')" >&2
    fail=1
  fi
done

# Global constructors: a static initialiser function or an init section in any object.
ctors=$(nm "${objects[@]}" 2>/dev/null | grep -E '_GLOBAL__sub_I_|_GLOBAL__I_' || true)
if [ -n "$ctors" ]; then
  echo "PURITY: global constructor(s) in the engine: $ctors" >&2
  fail=1
fi
sections=$(objdump -h "${objects[@]}" 2>/dev/null | awk '/file format/ {obj=$1} /\.init_array|\.ctors/ {print obj, $2}' || true)
if [ -n "$sections" ]; then
  echo "PURITY: static initialiser section(s) in the engine: $sections" >&2
  fail=1
fi

count=$(wc -l <<<"$undefined")
if [ "$fail" -ne 0 ]; then
  echo "engine purity gate FAILED (see above): the engine must not do I/O, read clocks or" \
       "randomness, start threads or run global constructors" >&2
  exit 1
fi
echo "engine purity gate passed: $count undefined symbols checked, no static initialisers"

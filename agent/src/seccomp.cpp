// --seccomp: a system-call filter in the spirit of Docker's default profile, for sandboxes
// that have no runtime of their own to install one (local://). The agent installs it on itself
// before it serves anything, so every command and code context it starts inherits it; a
// filter can never be removed, only narrowed.
//
// Docker's profile allows a list and refuses the rest; this one refuses, with EPERM as Docker
// does, the calls that profile keeps from a container without extra capabilities: kernel
// modules and kexec, mounts and namespace changes, the kernel keyring, BPF and perf, clock
// and swap changes, reboot, handle-based opens (the escape of "shocker"), userfaultfd and
// io_uring. ptrace stays allowed as in Docker on kernels from 4.8 (debuggers work).
// Another architecture's system calls (x32 on x86_64, a 32-bit ABI) are refused whole.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "agent.hpp"

namespace sandboxio::agent_main {
namespace {

#if defined(__x86_64__)
constexpr std::uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr std::uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
#error "sandboxio-agent --seccomp: add this architecture's AUDIT_ARCH"
#endif

const std::vector<int>& refused() {
  // clang-format off
  static const std::vector<int> calls = {
#define SBX_REFUSE(name) __NR_##name,
#ifdef __NR_acct
      SBX_REFUSE(acct)
#endif
#ifdef __NR_add_key
      SBX_REFUSE(add_key)
#endif
#ifdef __NR_bpf
      SBX_REFUSE(bpf)
#endif
#ifdef __NR_clock_adjtime
      SBX_REFUSE(clock_adjtime)
#endif
#ifdef __NR_clock_settime
      SBX_REFUSE(clock_settime)
#endif
#ifdef __NR_create_module
      SBX_REFUSE(create_module)
#endif
#ifdef __NR_delete_module
      SBX_REFUSE(delete_module)
#endif
#ifdef __NR_finit_module
      SBX_REFUSE(finit_module)
#endif
#ifdef __NR_fsconfig
      SBX_REFUSE(fsconfig)
#endif
#ifdef __NR_fsmount
      SBX_REFUSE(fsmount)
#endif
#ifdef __NR_fsopen
      SBX_REFUSE(fsopen)
#endif
#ifdef __NR_fspick
      SBX_REFUSE(fspick)
#endif
#ifdef __NR_get_kernel_syms
      SBX_REFUSE(get_kernel_syms)
#endif
#ifdef __NR_init_module
      SBX_REFUSE(init_module)
#endif
#ifdef __NR_io_uring_enter
      SBX_REFUSE(io_uring_enter)
#endif
#ifdef __NR_io_uring_register
      SBX_REFUSE(io_uring_register)
#endif
#ifdef __NR_io_uring_setup
      SBX_REFUSE(io_uring_setup)
#endif
#ifdef __NR_ioperm
      SBX_REFUSE(ioperm)
#endif
#ifdef __NR_iopl
      SBX_REFUSE(iopl)
#endif
#ifdef __NR_kexec_file_load
      SBX_REFUSE(kexec_file_load)
#endif
#ifdef __NR_kexec_load
      SBX_REFUSE(kexec_load)
#endif
#ifdef __NR_keyctl
      SBX_REFUSE(keyctl)
#endif
#ifdef __NR_lookup_dcookie
      SBX_REFUSE(lookup_dcookie)
#endif
#ifdef __NR_mount
      SBX_REFUSE(mount)
#endif
#ifdef __NR_mount_setattr
      SBX_REFUSE(mount_setattr)
#endif
#ifdef __NR_move_mount
      SBX_REFUSE(move_mount)
#endif
#ifdef __NR_name_to_handle_at
      SBX_REFUSE(name_to_handle_at)
#endif
#ifdef __NR_nfsservctl
      SBX_REFUSE(nfsservctl)
#endif
#ifdef __NR_open_by_handle_at
      SBX_REFUSE(open_by_handle_at)
#endif
#ifdef __NR_open_tree
      SBX_REFUSE(open_tree)
#endif
#ifdef __NR_perf_event_open
      SBX_REFUSE(perf_event_open)
#endif
#ifdef __NR_pivot_root
      SBX_REFUSE(pivot_root)
#endif
#ifdef __NR_query_module
      SBX_REFUSE(query_module)
#endif
#ifdef __NR_quotactl
      SBX_REFUSE(quotactl)
#endif
#ifdef __NR_reboot
      SBX_REFUSE(reboot)
#endif
#ifdef __NR_request_key
      SBX_REFUSE(request_key)
#endif
#ifdef __NR_setns
      SBX_REFUSE(setns)
#endif
#ifdef __NR_settimeofday
      SBX_REFUSE(settimeofday)
#endif
#ifdef __NR_swapoff
      SBX_REFUSE(swapoff)
#endif
#ifdef __NR_swapon
      SBX_REFUSE(swapon)
#endif
#ifdef __NR_syslog
      SBX_REFUSE(syslog)
#endif
#ifdef __NR__sysctl
      SBX_REFUSE(_sysctl)
#endif
#ifdef __NR_umount2
      SBX_REFUSE(umount2)
#endif
#ifdef __NR_unshare
      SBX_REFUSE(unshare)
#endif
#ifdef __NR_uselib
      SBX_REFUSE(uselib)
#endif
#ifdef __NR_userfaultfd
      SBX_REFUSE(userfaultfd)
#endif
#ifdef __NR_ustat
      SBX_REFUSE(ustat)
#endif
#ifdef __NR_vhangup
      SBX_REFUSE(vhangup)
#endif
#undef SBX_REFUSE
  };
  // clang-format on
  return calls;
}

}  // namespace

bool install_seccomp(std::string& error) {
  const std::vector<int>& calls = refused();
  // [arch check] [load nr] [x32 check] [one test per refused call] [allow] [EPERM] [kill]
  std::vector<sock_filter> prog;
  const auto n = static_cast<std::uint8_t>(calls.size());
  static_assert(sizeof(sock_filter::jt) == 1);
  prog.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
  // A foreign architecture: jump over everything to the kill at the very end.
  prog.push_back(
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 0, static_cast<std::uint8_t>(1 + 1 + n + 2)));
  prog.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
#if defined(__x86_64__)
  prog.push_back(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, static_cast<std::uint8_t>(n + 1),
                          0));  // __X32_SYSCALL_BIT: refused
#else
  prog.push_back(BPF_JUMP(BPF_JMP | BPF_JA, 0, 0, 0));  // keeps the offsets the same
#endif
  for (std::size_t i = 0; i < calls.size(); ++i) {
    prog.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(calls[i]),
                            static_cast<std::uint8_t>(n - i), 0));
  }
  prog.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  prog.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)));
  prog.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  sock_fprog fprog{static_cast<unsigned short>(prog.size()), prog.data()};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    error = std::string("no_new_privs: ") + std::strerror(errno);
    return false;
  }
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0) {
    error = std::string("installing the filter: ") + std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace sandboxio::agent_main

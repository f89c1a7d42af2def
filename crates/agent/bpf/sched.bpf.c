// SPDX-License-Identifier: GPL-2.0 OR MIT
// vassal's event source (issue 6): block and wake events of managed threads, from the
// scheduler tracepoints, into one ring buffer. Built by crates/agent/build.rs with
// `clang -target bpf -O2 -g` and loaded by crates/agent/src/bpf.rs (aya).
//
// Self-contained on purpose: no vmlinux.h and no libbpf headers. The kernel structs
// read, task_struct and its sched_entity, are declared with the fields used and
// __attribute__((preserve_access_index)), so clang emits CO-RE relocations and the loader
// fixes the field offsets against the running kernel's BTF (/sys/kernel/btf/vmlinux).
//
// Events (struct vassal_event, 32 bytes; decoded by bpf::Event::decode; each carries
// the thread's CPU time so far, se.sum_exec_runtime — the first field of
// /proc/TID/schedstat —, exact at a block, whose switch-out has just brought it up to
// date):
//   BLOCK  sched_switch: prev is managed, !preempt and prev_state != TASK_RUNNING (0):
//          prev went to sleep (a preemption or a yield is not a block);
//   WAKE   sched_wakeup: a managed thread whose last event was a BLOCK (the BLOCKED
//          flag in its `tids` value, set at the block and cleared here: each block is
//          followed by one wake) is on a run queue again (traced after its own switch-out
//          has been traced, so a wake never overtakes the block it ends; sched_waking can
//          fire while the sleeper is still switching out on another CPU); `state` carries
//          the CPU it was woken on (p->wake_cpu, set with the CPU of the run queue it was
//          put on). On this VM's 6.18 kernel the program is now and then not run for a
//          managed thread's wake (0-2 times in a 2 s run of
//          docs/examples/rt-app/twin-mutex.json: ftrace records the sched_waking, from a
//          hard interrupt while a thread of the VM's PID 1 is current, then neither the
//          sched_wakeup nor the switch into the thread; a program on sched_waking missed
//          as many), and a thread the agent believed blocked was left parked for seconds;
//   RUNNING sched_switch: a managed task switched in, or preempted, while its last event
//          was a BLOCK: its wake was missed (or it was running when it was watched: a
//          new watch starts BLOCKED, the agent reading its state from /proc after), and
//          this stands for it (`state`: the CPU). A missed wake of a thread that cannot
//          run is found by the agent's audit (state/pass.rs);
//   NEW    sched_wakeup_new: a new thread whose thread-group leader is managed (the
//          agent adopts it at once instead of at its next rescan). The program runs in
//          the creating thread's context (wake_up_new_task, called by clone), so the
//          event carries the creator's tid (bpf_get_current_pid_tgid): the agent saves
//          the state the new thread would have inherited from the creator's original.
// Managed tids are the keys of `tids` (value: the tgid the agent manages them as, with
// BLOCKED, set by these programs from a block to the next wake: plain stores, since a
// thread's block and its wake are traced one after the other), inserted (with BLOCKED)
// and deleted by the agent at join, leave and rescan and otherwise written only here.
// `quiet` holds the tids whose wakes (QUIET_WAKE) or blocks (QUIET_BLOCK) need no
// wake-up of the agent, `waiting` whether a thread waits for a CPU (the agent writes both).
//
// Wake-ups: the agent's dispatcher sleeps in epoll on the ring buffer. Every event wakes
// it (BPF_RB_FORCE_WAKEUP: the default wakes the reader only when it had read
// everything, and a quiet record below may be waiting unread) except, with
// BPF_RB_NO_WAKEUP, the WAKE of a thread marked QUIET_WAKE — one the agent armed, or a
// best-effort one in the fair class without a warp: the kernel runs it the instant it
// wakes — and the BLOCK of one marked QUIET_BLOCK — best effort in the fair class —
// while `waiting` is 0 (no thread the agent parked or held is runnable: the CPU the
// block frees is wanted by nobody the agent must place), unless it is an exit. The agent
// takes those at its next pass (state/pass.rs, "Quiet wakes and blocks").

typedef unsigned char __u8;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef int pid_t;

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

enum { BPF_MAP_TYPE_HASH = 1, BPF_MAP_TYPE_ARRAY = 2, BPF_MAP_TYPE_RINGBUF = 27 };

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static __u32 (*bpf_get_smp_processor_id)(void) = (void *)8;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, __u64 size, __u64 flags) = (void *)130;

enum { BPF_RB_NO_WAKEUP = 1, BPF_RB_FORCE_WAKEUP = 2 };
#define BLOCKED 0x40000000u
// The bits of a `quiet` value (the agent's crate::bpf::QUIET_WAKE and QUIET_BLOCK).
#define QUIET_WAKE 1
#define QUIET_BLOCK 2
#define TASK_DEAD 0x80

struct sched_entity {
	__u64 sum_exec_runtime;
} __attribute__((preserve_access_index));

struct task_struct {
	int wake_cpu;
	pid_t pid;
	pid_t tgid;
	struct sched_entity se;
} __attribute__((preserve_access_index));

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u32);
} tids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} quiet SEC(".maps");

// One value: nonzero while a managed thread the agent parked or held is runnable, waiting
// for a CPU that a block may free: every block is then loud.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} waiting SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
} events SEC(".maps");

enum { EV_BLOCK = 1, EV_WAKE = 2, EV_NEW = 3, EV_RUNNING = 4 };

struct vassal_event {
	__u32 tid;
	__u32 tgid;
	__u32 kind;
	__u32 state; // prev_state at a block (TASK_DEAD 0x80: it exited); the CPU at WAKE; the creator's tid at NEW
	__u64 time; // CLOCK_MONOTONIC ns (bpf_ktime_get_ns)
	__u64 runtime; // its CPU time so far, ns (se.sum_exec_runtime)
};

static __attribute__((always_inline)) int emit(struct task_struct *p, __u32 kind, __u32 state, __u64 flags)
{
	struct vassal_event e;
	e.tid = p->pid;
	e.tgid = p->tgid;
	e.kind = kind;
	e.state = state;
	e.time = bpf_ktime_get_ns();
	e.runtime = p->se.sum_exec_runtime;
	bpf_ringbuf_output(&events, &e, sizeof(e), flags);
	return 0;
}

// The ring buffer flag of a block of `tid`: quiet only if the agent marked its blocks
// quiet, no thread waits for a CPU (`waiting`), and it is not an exit.
static __attribute__((always_inline)) __u64 block_wakeup(__u32 tid, __u32 prev_state)
{
	__u32 zero = 0;
	__u8 *q = bpf_map_lookup_elem(&quiet, &tid);
	__u32 *w = bpf_map_lookup_elem(&waiting, &zero);
	if (q && (*q & QUIET_BLOCK) && w && *w == 0 && !(prev_state & TASK_DEAD))
		return BPF_RB_NO_WAKEUP;
	return BPF_RB_FORCE_WAKEUP;
}

// tp_btf/sched_switch: (bool preempt, struct task_struct *prev, struct task_struct *next,
// unsigned int prev_state)
SEC("tp_btf/sched_switch")
int vassal_switch(__u64 *ctx)
{
	int preempt = (int)(__u8)ctx[0];
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	__u32 prev_state = (__u32)ctx[3];
	__u32 tid = prev->pid;
	__u32 *v = bpf_map_lookup_elem(&tids, &tid);
	if (v) {
		if (!preempt && prev_state != 0) {
			*v |= BLOCKED;
			emit(prev, EV_BLOCK, prev_state, block_wakeup(tid, prev_state));
		} else if (*v & BLOCKED) {
			// Preempted or yielding while its last event said blocked: its wake was
			// missed (RUNNING below).
			*v &= ~BLOCKED;
			emit(prev, EV_RUNNING, (__u32)bpf_get_smp_processor_id(), BPF_RB_FORCE_WAKEUP);
		}
	}
	tid = next->pid;
	v = bpf_map_lookup_elem(&tids, &tid);
	if (v && (*v & BLOCKED)) {
		*v &= ~BLOCKED;
		emit(next, EV_RUNNING, (__u32)bpf_get_smp_processor_id(), BPF_RB_FORCE_WAKEUP);
	}
	return 0;
}

// tp_btf/sched_wakeup: (struct task_struct *p)
SEC("tp_btf/sched_wakeup")
int vassal_wakeup(__u64 *ctx)
{
	struct task_struct *p = (struct task_struct *)ctx[0];
	__u32 tid = p->pid;
	__u32 *v = bpf_map_lookup_elem(&tids, &tid);
	if (!v || !(*v & BLOCKED))
		return 0;
	*v &= ~BLOCKED;
	__u8 *q = bpf_map_lookup_elem(&quiet, &tid);
	__u64 flags = q && (*q & QUIET_WAKE) ? BPF_RB_NO_WAKEUP : BPF_RB_FORCE_WAKEUP;
	return emit(p, EV_WAKE, (__u32)p->wake_cpu, flags);
}

// tp_btf/sched_wakeup_new: (struct task_struct *p)
SEC("tp_btf/sched_wakeup_new")
int vassal_wakeup_new(__u64 *ctx)
{
	struct task_struct *p = (struct task_struct *)ctx[0];
	__u32 tgid = p->tgid;
	__u32 tid = p->pid;
	// A new thread of a managed process (its leader's tid is a key); a new process
	// (tid == tgid) is not managed.
	if (tid == tgid || !bpf_map_lookup_elem(&tids, &tgid))
		return 0;
	// The current task is the creator (the low half: its tid).
	return emit(p, EV_NEW, (__u32)bpf_get_current_pid_tgid(), BPF_RB_FORCE_WAKEUP);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";

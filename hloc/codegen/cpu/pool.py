"""LLVM IR of a native work-sharing pool: spin-then-sleep workers sharing one job's pieces.

Why: the Python pool (runtime/cpu/parallel.py) wakes its workers through a queue and the GIL,
10-20 us per wake-up, as long as a 32 x 256 x 256 product takes on one core, so mid-size
products (a scan RNN's steps) ran on one thread where XLA's Eigen pool uses every core. Here
the workers are threads the runtime starts once, each sitting in `hloc_pool_worker` (entered
through ctypes, so without the GIL): after a job they spin on the pool's generation word for
a while (a wake-up then costs a cache miss) and only then sleep on it in the kernel (futex).

A job is `fn(arg, index, work)` for index in [0, count): the caller publishes it and then
claims pieces itself like any worker, so a worker the OS has not scheduled (another process
holds the core) never delays the run; the caller then waits only for pieces already claimed.
`work` is the claiming thread's own scratch (the GEMM's packing buffer). Claims go through
one word holding (generation << 32 | next index): a worker still finishing an old job cannot
claim a piece of the next one. One caller at a time: a second (another device's thread) finds
the pool busy and runs its pieces itself.

The state is STATE_BYTES of zeroed memory the runtime owns; the fields below are byte
offsets, each hot word on its own cache line. Everything is seq_cst: a job costs a handful
of atomics, next to microseconds of work per piece.
"""

from __future__ import annotations

from llvmlite import ir

I32, I64 = ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()

GENERATION = 0  # i32: bumped per job; the futex word sleepers wait on
CLAIM = 64  # i64: generation << 32 | next unclaimed index
FINISHED = 128  # i64: pieces of the current job done
SLEEPERS = 192  # i32: workers asleep (or about to be) in the futex
JOB_FN, JOB_ARG, JOB_COUNT = 256, 264, 272  # the current job
BUSY = 320  # i32: a caller owns the pool
ALONE_UNTIL = 328  # i64: time-stamp counter until which owners run jobs alone (see run)
CONTENDED_AT = 336  # i64: time-stamp counter when a worker last found its core taken (worker)
STOP = 384  # i32: workers return (tests shut their pools down)
SPIN_CYCLES = 448  # i64: how long (time-stamp counter cycles) a worker spins before sleeping
STATE_BYTES = 512

SYSCALL = "hloc_syscall"  # the C library's syscall(), provided to the JIT by the runtime
_FUTEX, _FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE, _SCHED_YIELD = 202, 128, 129, 24
# Spins of the caller waiting for claimed pieces before each sched_yield.
_WAIT_SPINS = 2048
# A caller that ran pieces itself and then waited for the workers longer than it worked plus
# this many time-stamp-counter cycles (about 0.5 ms at 3 GHz: more than a worker needs to
# wake up, less than the scheduler's slice when another process takes its core) counts its
# worker as preempted: jobs run on the calling thread alone for _BACKOFF_CYCLES. Measured
# on a 2-core host shared with other processes (load 6-8): a 200-step scan RNN whose products
# were shared took 1.4x as long as on one thread, most of it spent waiting for preempted
# workers. The wait is judged against the caller's own work, not as a count of spins: a
# fixed count (2048 pauses, some 40 us) also caught a worker that was merely finishing its
# half of a big product, and sent every product after it to one thread (1024^3 cut in two
# ran in 37 ms, as on one thread, instead of 18).
_PREEMPTED_SLACK_CYCLES = 1_500_000
# About 3 ms at 3 GHz: longer than 64 jobs of that RNN took. A count of jobs (64, before) sent
# a big product's next 64 calls to one thread: on a 2-vCPU VM whose hypervisor now and then
# holds a vCPU back (2-4 such waits in 3,000 calls of 1024 x 256 x 256 cut in two), those calls
# took 1.3 ms instead of 0.7 (p90 1.29 ms against a median of 0.71), and a tenth of 300 calls
# of 1024^3 took one thread's 21 ms instead of 10.8. Now: p90 0.71 against a median of 0.67.
_BACKOFF_CYCLES = 9_000_000
# A spinning worker that finds this many time-stamp-counter cycles (about 1 ms) between two
# turns of its loop was descheduled for a scheduler slice: another process wants its core. It
# records the time (CONTENDED_AT) and sleeps, and for _CONTENDED_HOLD_CYCLES (about 10 ms) the
# callers run their jobs alone and wake no worker. With a busy process on one of two cores, a
# 200-step scan RNN's shared products took 14.6-19.2 ms (median; one thread: 12 ms), as the
# spinning worker took the caller's core even when it claimed no piece, so the caller saw no
# late wait; with this, 13.0-15.2 ms (4 alternated pairs, 2 Zen 4 cores). Without that process,
# unchanged (8.4-9.0 ms against 8.7-9.2). A gap of 50 us also caught interrupts and the
# hypervisor's pauses and cost 5-35 % there.
_SPIN_GAP_CYCLES = 3_000_000
_CONTENDED_HOLD_CYCLES = 30_000_000
PIECE_TYPE = ir.FunctionType(ir.VoidType(), [PTR, I64, PTR])
RUN_TYPE = ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR, I64, PTR])
SC = "seq_cst"


def _c(v: int, t=I64) -> ir.Constant:
    return ir.Constant(t, v)


def _callee(b: ir.IRBuilder, address):
    """A piece function's address (an i64) as a callable value (llvmlite calls through typed
    function pointers; LLVM reads the type as an opaque ptr)."""
    return b.inttoptr(address, ir.PointerType(PIECE_TYPE))


class _Pool:
    """Builds the pool's functions into one module."""

    def __init__(self, module: ir.Module):
        self.module = module
        self.syscall = ir.Function(module, ir.FunctionType(I64, [I64], var_arg=True), SYSCALL)
        self.pause = ir.Function(module, ir.FunctionType(ir.VoidType(), []),
                                 "llvm.x86.sse2.pause")
        self.tsc = ir.Function(module, ir.FunctionType(I64, []), "llvm.readcyclecounter")

    @staticmethod
    def field(b: ir.IRBuilder, state, offset: int):
        return b.gep(state, [_c(offset)], inbounds=True, source_etype=ir.IntType(8))

    def load(self, b, state, offset, typ=I64):
        return b.load_atomic(self.field(b, state, offset), SC, typ.width // 8, typ=typ)

    def store(self, b, value, state, offset):
        """A seq_cst store, as an exchange (llvmlite's store_atomic needs typed pointers)."""
        b.atomic_rmw("xchg", self.field(b, state, offset), value, SC)

    def work(self) -> ir.Function:
        """work(state, work, gen) -> how many it ran: claim and run pieces of job `gen` until
        none is left."""
        fn = ir.Function(self.module, ir.FunctionType(I64, [PTR, PTR, I64]),
                         "hloc_pool_work")
        fn.linkage = "internal"
        state, work, gen = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        # Read before claiming: a successful claim of `gen` proves these are its fields.
        piece = self.load(b, state, JOB_FN, I64)
        arg, count = self.load(b, state, JOB_ARG), self.load(b, state, JOB_COUNT)
        first = self.load(b, state, CLAIM)
        entry = b.block
        head, claim, run, done = (fn.append_basic_block(n) for n in ("head", "claim", "run",
                                                                     "done"))
        b.branch(head)
        b.position_at_end(head)
        word, ran = b.phi(I64, "word"), b.phi(I64, "ran")
        word.add_incoming(first, entry)
        ran.add_incoming(_c(0), entry)
        index = b.and_(word, _c(0xFFFFFFFF))
        mine = b.and_(b.icmp_unsigned("==", b.lshr(word, _c(32)), gen),
                      b.icmp_unsigned("<", index, count))
        b.cbranch(mine, claim, done)
        b.position_at_end(claim)
        pair = b.cmpxchg(self.field(b, state, CLAIM), word, b.add(word, _c(1)), SC, SC)
        seen, ok = b.extract_value(pair, 0), b.extract_value(pair, 1)
        word.add_incoming(seen, claim)
        ran.add_incoming(ran, claim)
        b.cbranch(ok, run, head)
        b.position_at_end(run)
        b.call(_callee(b, piece), [b.inttoptr(arg, PTR), index, work])
        b.atomic_rmw("add", self.field(b, state, FINISHED), _c(1), SC)
        word.add_incoming(self.load(b, state, CLAIM), run)
        ran.add_incoming(b.add(ran, _c(1)), run)
        b.branch(head)
        b.position_at_end(done)
        b.ret(ran)
        return fn

    def run(self, work: ir.Function) -> ir.Function:
        """hloc_pool_run(state, fn, arg, count, work): fn(arg, i, work') for every i < count,
        shared with the pool's workers (all on this thread without a state or when busy)."""
        fn = ir.Function(self.module, RUN_TYPE, "hloc_pool_run")
        state, piece, arg, count, mywork = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        alone = fn.append_basic_block("alone")
        shared = fn.append_basic_block("shared")
        b.cbranch(b.or_(b.icmp_unsigned("==", state, ir.Constant(PTR, None)),
                        b.icmp_signed("<=", count, _c(1))), alone, shared)
        b.position_at_end(alone)
        self._serial(b, piece, arg, count, mywork)
        b.position_at_end(shared)
        pair = b.cmpxchg(self.field(b, state, BUSY), _c(0, I32), _c(1, I32), SC, SC)
        owned = fn.append_basic_block("owned")
        b.cbranch(b.extract_value(pair, 1), owned, alone)
        b.position_at_end(owned)
        since = b.sub(b.call(self.tsc, []), self.load(b, state, CONTENDED_AT))
        contended, clear = fn.append_basic_block("contended"), fn.append_basic_block("clear")
        b.cbranch(b.icmp_signed("<", since, _c(_CONTENDED_HOLD_CYCLES)), contended, clear)
        b.position_at_end(contended)
        self.store(b, _c(0, I32), state, BUSY)
        b.branch(alone)
        b.position_at_end(clear)
        ahead = b.sub(self.load(b, state, ALONE_UNTIL), b.call(self.tsc, []))
        skip, publish = fn.append_basic_block("skip"), fn.append_basic_block("publish")
        b.cbranch(b.icmp_signed(">", ahead, _c(0)), skip, publish)
        b.position_at_end(skip)
        self.store(b, _c(0, I32), state, BUSY)
        b.branch(alone)
        b.position_at_end(publish)
        gen = b.add(self.load(b, state, GENERATION, I32), _c(1, I32))
        gen64 = b.zext(gen, I64)
        self.store(b, b.shl(gen64, _c(32)), state, CLAIM)
        self.store(b, _c(0), state, FINISHED)
        self.store(b, b.ptrtoint(piece, I64), state, JOB_FN)
        self.store(b, b.ptrtoint(arg, I64), state, JOB_ARG)
        self.store(b, count, state, JOB_COUNT)
        self.store(b, gen, state, GENERATION)
        self._wake_sleepers(b, state)
        start = b.call(self.tsc, [])
        ran = b.call(work, [state, mywork, gen64])
        worked = b.call(self.tsc, [])
        self._await(b, state, count)
        waited = b.sub(b.call(self.tsc, []), worked)
        late = b.icmp_unsigned(">", waited, b.add(b.sub(worked, start),
                                                   _c(_PREEMPTED_SLACK_CYCLES)))
        with b.if_then(b.and_(b.icmp_signed(">", ran, _c(0)), late)):
            self.store(b, b.add(b.call(self.tsc, []), _c(_BACKOFF_CYCLES)), state, ALONE_UNTIL)
        self.store(b, _c(0, I32), state, BUSY)
        b.ret_void()
        return fn

    def _serial(self, b, piece, arg, count, work) -> None:
        """fn(arg, i, work) for i < count on this thread, then return."""
        fn = b.function
        head, body, end = (fn.append_basic_block(f"serial.{n}") for n in ("head", "body", "end"))
        pre = b.block
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, "i")
        i.add_incoming(_c(0), pre)
        b.cbranch(b.icmp_signed("<", i, count), body, end)
        b.position_at_end(body)
        b.call(_callee(b, b.ptrtoint(piece, I64)), [arg, i, work])
        i.add_incoming(b.add(i, _c(1)), body)
        b.branch(head)
        b.position_at_end(end)
        b.ret_void()

    def _wake_sleepers(self, b, state) -> None:
        """futex-wake every worker if any is asleep (the generation was bumped before this
        read, and a worker counts itself asleep before it re-reads the generation)."""
        with b.if_then(b.icmp_signed(">", self.load(b, state, SLEEPERS, I32), _c(0, I32))):
            b.call(self.syscall, [_c(_FUTEX), self.field(b, state, GENERATION),
                                  _c(_FUTEX_WAKE_PRIVATE), _c(0x7FFFFFFF)])

    def _await(self, b, state, count) -> None:
        """Spin until every piece is finished, yielding the core now and then (a worker that
        claimed a piece may have been preempted)."""
        fn = b.function
        head, spin, end = (fn.append_basic_block(f"await.{n}") for n in ("head", "spin", "end"))
        pre = b.block
        b.branch(head)
        b.position_at_end(head)
        n = b.phi(I64, "n")
        n.add_incoming(_c(0), pre)
        b.cbranch(b.icmp_signed("<", self.load(b, state, FINISHED), count), spin, end)
        b.position_at_end(spin)
        b.call(self.pause, [])
        with b.if_then(b.icmp_signed("==", b.and_(n, _c(_WAIT_SPINS - 1)),
                                     _c(_WAIT_SPINS - 1))):
            b.call(self.syscall, [_c(_SCHED_YIELD)])
        n.add_incoming(b.add(n, _c(1)), b.block)
        b.branch(head)
        b.position_at_end(end)

    def worker(self, work: ir.Function) -> ir.Function:
        """hloc_pool_worker(state, work): a worker thread's life, until STOP is set: wait for
        a new generation (spinning SPIN_CYCLES, then asleep in the futex), work on its job."""
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, PTR]),
                         "hloc_pool_worker")
        state, mywork = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        blocks = {n: fn.append_basic_block(n) for n in ("wait", "spin", "sleep", "got", "stop")}
        first = self.load(b, state, GENERATION, I32)
        # A pool stopped before this thread ran has bumped the generation for the last time:
        # STOP, read after the generation (stored before it), is already set then.
        entry = b.block
        b.cbranch(b.icmp_signed("!=", self.load(b, state, STOP, I32), _c(0, I32)),
                  blocks["stop"], blocks["wait"])
        b.position_at_end(blocks["wait"])  # a new wait for a generation after `seen`
        seen = b.phi(I32, "seen")
        seen.add_incoming(first, entry)
        start = b.call(self.tsc, [])
        wait_end = b.block
        b.branch(blocks["spin"])
        b.position_at_end(blocks["spin"])
        last = b.phi(I64, "last")
        last.add_incoming(start, wait_end)
        now = self.load(b, state, GENERATION, I32)
        fresh = b.icmp_unsigned("!=", now, seen)
        keep = fn.append_basic_block("keep")
        b.cbranch(fresh, blocks["got"], keep)
        b.position_at_end(keep)
        b.call(self.pause, [])
        t = b.call(self.tsc, [])
        more = b.icmp_unsigned("<", b.sub(t, start), self.load(b, state, SPIN_CYCLES))
        taken, spun = fn.append_basic_block("taken"), fn.append_basic_block("spun")
        b.cbranch(b.icmp_unsigned(">", b.sub(t, last), _c(_SPIN_GAP_CYCLES)), taken, spun)
        b.position_at_end(taken)  # descheduled while spinning: the core is wanted elsewhere
        self.store(b, t, state, CONTENDED_AT)
        b.branch(blocks["sleep"])
        b.position_at_end(spun)
        last.add_incoming(t, spun)
        b.cbranch(more, blocks["spin"], blocks["sleep"])
        b.position_at_end(blocks["sleep"])
        self._sleep(b, state, seen)
        seen.add_incoming(seen, b.block)
        b.branch(blocks["wait"])
        b.position_at_end(blocks["got"])
        stop = self.load(b, state, STOP, I32)
        working = fn.append_basic_block("working")
        b.cbranch(b.icmp_signed("!=", stop, _c(0, I32)), blocks["stop"], working)
        b.position_at_end(working)
        b.call(work, [state, mywork, b.zext(now, I64)])
        seen.add_incoming(now, working)
        b.branch(blocks["wait"])
        b.position_at_end(blocks["stop"])
        b.ret_void()
        return fn

    def _sleep(self, b, state, seen) -> None:
        """Count this worker asleep, then futex-wait while the generation is still `seen`."""
        sleepers = self.field(b, state, SLEEPERS)
        b.atomic_rmw("add", sleepers, _c(1, I32), SC)
        with b.if_then(b.icmp_unsigned("==", self.load(b, state, GENERATION, I32), seen)):
            b.call(self.syscall, [_c(_FUTEX), self.field(b, state, GENERATION),
                                  _c(_FUTEX_WAIT_PRIVATE), b.zext(seen, I64),
                                  ir.Constant(PTR, None)])
        b.atomic_rmw("sub", sleepers, _c(1, I32), SC)


def add_pool(module: ir.Module) -> ir.Function:
    """Define hloc_pool_run and hloc_pool_worker in `module`; returns hloc_pool_run."""
    pool = _Pool(module)
    work = pool.work()
    pool.worker(work)
    return pool.run(work)


def add_job(module: ir.Module, list_with: ir.Function, run: ir.Function) -> None:
    """hloc_sgemm_job(job): a job of i64 words [pool state (0: none), count, then `count`
    hloc_sgemm_list lists], the lists shared with the pool. The calling thread packs into
    the first list's work buffer, each worker into its own. What native drivers call."""
    piece = ir.Function(module, PIECE_TYPE, "hloc_sgemm_piece")
    piece.linkage = "internal"
    job, index, work = piece.args
    b = ir.IRBuilder(piece.append_basic_block("entry"))
    lst = b.load(b.gep(job, [b.add(index, _c(2))], inbounds=True, source_etype=I64), typ=I64)
    b.call(list_with, [b.inttoptr(lst, PTR), work])
    b.ret_void()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), "hloc_sgemm_job")
    (job,) = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def word(p, i):
        return b.load(b.gep(p, [_c(i)], inbounds=True, source_etype=I64), typ=I64)

    first = b.inttoptr(word(job, 2), PTR)
    b.call(run, [b.inttoptr(word(job, 0), PTR), piece, job, word(job, 1),
                 b.inttoptr(word(first, 1), PTR)])
    b.ret_void()


# i64 words of a kernel job (hloc_kernel_job): the pool's state (0: none), how many pieces,
# the kernel (the ABI's fn(pointers, begin, end)), its pointer array, and its unit count.
KERNEL_JOB_WORDS = 5


def add_kernel_job(module: ir.Module, run: ir.Function) -> None:
    """hloc_kernel_job(job): a kernel's units [0, extent) cut into `pieces` equal ranges,
    shared with the pool (job: KERNEL_JOB_WORDS i64 words, see there). The runtime's way to
    split a big kernel across threads without Python's threads."""
    kernel_type = ir.FunctionType(ir.VoidType(), [PTR, I64, I64])
    piece = ir.Function(module, PIECE_TYPE, "hloc_kernel_piece")
    piece.linkage = "internal"
    job, index, _work = piece.args
    b = ir.IRBuilder(piece.append_basic_block("entry"))

    def word(i):
        return b.load(b.gep(job, [_c(i)], inbounds=True, source_etype=I64), typ=I64)

    parts, kernel, pointers, extent = word(1), word(2), word(3), word(4)
    begin = b.sdiv(b.mul(extent, index), parts)
    end = b.sdiv(b.mul(extent, b.add(index, _c(1))), parts)
    b.call(b.inttoptr(kernel, ir.PointerType(kernel_type)), [b.inttoptr(pointers, PTR), begin,
                                                             end])
    b.ret_void()
    _job_entry(module, "hloc_kernel_job", piece, run)


def add_call_job(module: ir.Module, run: ir.Function) -> None:
    """hloc_call_job(job): fn(arg_i) for each of `count` arguments, shared with the pool (job:
    i64 words [pool state (0: none), count, fn, arg_0, ..., arg_{count-1}], fn a void(ptr)).
    The runtime's way to run the pieces of a native convolution (conv_native) on the pool."""
    call_type = ir.FunctionType(ir.VoidType(), [PTR])
    piece = ir.Function(module, PIECE_TYPE, "hloc_call_piece")
    piece.linkage = "internal"
    job, index, _work = piece.args
    b = ir.IRBuilder(piece.append_basic_block("entry"))

    def word(offset):
        return b.load(b.gep(job, [offset], inbounds=True, source_etype=I64), typ=I64)

    target = b.inttoptr(word(_c(2)), ir.PointerType(call_type))
    b.call(target, [b.inttoptr(word(b.add(index, _c(3))), PTR)])
    b.ret_void()
    _job_entry(module, "hloc_call_job", piece, run)


def _job_entry(module: ir.Module, name: str, piece: ir.Function, run: ir.Function) -> None:
    """`name`(job): `piece` for indices [0, job[1]) on the pool whose state is job[0]."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), name)
    (job,) = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    state = b.load(job, typ=I64)
    count = b.load(b.gep(job, [_c(1)], inbounds=True, source_etype=I64), typ=I64)
    b.call(run, [b.inttoptr(state, PTR), piece, job, count, ir.Constant(PTR, None)])
    b.ret_void()

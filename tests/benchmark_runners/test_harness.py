import time

import pytest

from benchmark_runners.harness import TimingPolicy, measure, noise_floor_start
from benchmark_runners.timers import HostClock


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_steady_work_converges_within_the_ci_target():
    """Steady work converges. On a machine where another process takes the core, the samples
    are not steady: up to three tries, then a skip that names the share of a core this process
    got, so a busy neighbour is told apart from a harness that does not converge."""
    for _ in range(3):
        cpu, wall = time.process_time(), time.perf_counter()
        m = measure(lambda clock: busy(0.002), HostClock(), TimingPolicy(ci_target=0.02, max_time_s=5))
        share = (time.process_time() - cpu) / (time.perf_counter() - wall)
        if m.stop_reason == "converged" and m.warmup_steady:
            break
    else:
        if share < 0.9:
            pytest.skip(f"machine busy: this process got {share:.0%} of a core while measuring, so steady work "
                        f"was not steady three times (last: stop {m.stop_reason}, warm-up steady {m.warmup_steady})")
    assert m.stop_reason == "converged"
    assert m.warmup_steady
    assert len(m.samples_ns) >= TimingPolicy().min_iterations
    assert all(ns >= 2_000_000 for ns in m.samples_ns)


def test_an_unreachable_target_stops_at_the_time_cap():
    policy = TimingPolicy(ci_target=0.0, max_time_s=0.3, warmup_max_time_s=0.1)
    started = time.perf_counter()
    m = measure(lambda clock: busy(0.001), HostClock(), policy)
    assert m.stop_reason == "time_cap"
    assert time.perf_counter() - started < 2.0


def test_max_iterations_caps_the_count():
    policy = TimingPolicy(ci_target=0.0, min_iterations=5, max_iterations=7, warmup_max_time_s=0.05)
    m = measure(lambda clock: None, HostClock(), policy)
    assert m.stop_reason == "max_iterations"
    assert len(m.samples_ns) == 7


class ScriptedClock:
    """An IterationClock whose iterations last what a script says: the warm-up logic is tested
    on exact durations, whatever else the machine is doing."""

    def __init__(self, durations_ns: list[int], then_ns: int):
        self.durations, self.then = list(durations_ns), then_ns

    def begin(self) -> None:
        pass

    def mark(self, phase: str) -> None:
        pass

    def end(self) -> tuple[int, dict[str, int]]:
        return (self.durations.pop(0) if self.durations else self.then), {}


def test_warmup_runs_until_a_decaying_warm_up_settles():
    # Real warm-up decays (allocator growth, kernel caches): a cold 22 ms call, then 20, 12, 8,
    # 5, 3.5 ms, then 2 ms. (A plateau of equally slow iterations would look steady to any
    # windowed detector.)
    profile = [22_000_000, 20_000_000, 12_000_000, 8_000_000, 5_000_000, 3_500_000]
    m = measure(lambda clock: None, ScriptedClock(profile, 2_000_000), TimingPolicy(max_time_s=2))
    assert m.first_iteration_ns == 22_000_000
    assert m.warmup_steady
    assert m.warmup_ns[: len(profile) - 1] == profile[1:]  # kept warming until the times settled
    assert m.warmup_ns[len(profile) - 1:] == [2_000_000] * (len(m.warmup_ns) - len(profile) + 1)
    assert set(m.samples_ns) == {2_000_000}  # no warm-up iteration leaked into the samples
    assert m.stop_reason == "converged"


def test_warmup_that_never_settles_is_reported_unsteady():
    alternating = [2_000_000, 6_000_000] * 100  # a busy neighbour taking every other time slice
    m = measure(lambda clock: None, ScriptedClock(alternating, 2_000_000), TimingPolicy(warmup_max_iterations=20))
    assert not m.warmup_steady and len(m.warmup_ns) == 20


def test_phase_marks_are_timed_and_add_up():
    def step(clock):
        busy(0.002)
        clock.mark("forward")
        busy(0.004)
        clock.mark("backward")

    m = measure(step, HostClock(), TimingPolicy(max_time_s=1, min_iterations=5))
    fwd, bwd = m.phase_samples_ns["forward"], m.phase_samples_ns["backward"]
    assert len(fwd) == len(bwd) == len(m.samples_ns)
    for total, f, b in zip(m.samples_ns, fwd, bwd):
        assert f >= 2_000_000 and b >= 4_000_000
        assert f + b <= total


def test_invalid_policy_is_rejected():
    with pytest.raises(ValueError, match="ci_target"):
        TimingPolicy(ci_target=1.5)
    with pytest.raises(ValueError, match="min_iterations"):
        TimingPolicy(min_iterations=0)
    # A window of no calls has no median to be steady against; negative figures mean nothing.
    with pytest.raises(ValueError, match="warmup_window"):
        TimingPolicy(warmup_window=0)
    with pytest.raises(ValueError, match="warmup_tolerance must not be negative"):
        TimingPolicy(warmup_tolerance=-0.1)


def test_a_single_warm_up_call_policy_measures():
    """warmup_min_iterations=1 is a valid policy: its first warm-up call has no earlier one to
    be steady against, so warming goes on to the second call instead of failing."""
    m = measure(lambda clock: None, ScriptedClock([5_000_000, 2_000_000, 2_000_000], 2_000_000),
                TimingPolicy(warmup_min_iterations=1, max_time_s=1))
    assert m.warmup_ns == [2_000_000, 2_000_000] and m.warmup_steady
    assert m.stop_reason == "converged"


def test_a_target_the_cap_cannot_reach_stops_at_the_noise_floor():
    """A bimodal machine (2 ms and 6 ms alternating): the median's CI spans both modes, and the
    samples that could narrow it to 2% would take far longer than the 8 s cap leaves, so the
    harness stops once that is clear instead of spending the cap."""
    bimodal = [2_000_000 if i % 2 else 6_000_000 for i in range(100_000)]
    policy = TimingPolicy(max_time_s=8)
    m = measure(lambda clock: None, ScriptedClock([2_000_000] * 8 + bimodal, 2_000_000), policy)
    assert m.stop_reason == "noise_floor"
    assert policy.noise_floor_min_iterations <= len(m.samples_ns) < 100
    # Steady samples converge before the rule could apply; with the rule off, the cap decides.
    import random

    rng = random.Random(3)
    noisy = [int(2_000_000 * (1 + 0.05 * rng.random())) for _ in range(100_000)]
    m = measure(lambda clock: None, ScriptedClock([2_000_000] * 8 + noisy, 2_000_000), TimingPolicy(max_time_s=8))
    assert m.stop_reason == "converged"
    off = TimingPolicy(max_time_s=3600, max_iterations=300, noise_floor_min_iterations=0)
    assert measure(lambda clock: None, ScriptedClock(list(bimodal), 2_000_000), off).stop_reason == "max_iterations"


def test_slow_noisy_iterations_reach_the_noise_floor_before_the_cap():
    """1.5 s iterations, bimodal (1.2 s and 1.8 s): a 30 s cap holds 20 of them, so the rule's
    usual 40 samples never come; it applies from 15 (75% of what the cap holds) and stops there
    instead of running to the cap. Off (share 0), the cap decides."""
    bimodal = [1_200_000_000 if i % 2 else 1_800_000_000 for i in range(200)]
    policy = TimingPolicy(max_time_s=30)
    assert noise_floor_start([1_500_000_000] * 10, policy) == 15
    assert noise_floor_start([2_000_000] * 10, policy) == policy.noise_floor_min_iterations  # fast: unchanged

    def run(policy: TimingPolicy):
        clock = ScriptedClock([1_500_000_000] * 3 + bimodal, 1_500_000_000)
        elapsed = [0.0]
        end = clock.end

        def timed_end():  # the caps run on the script's time, not the test's
            ns, phases = end()
            elapsed[0] += ns / 1e9
            return ns, phases

        clock.end = timed_end
        return measure(lambda c: None, clock, policy, now=lambda: elapsed[0])

    m = run(policy)
    assert m.stop_reason == "noise_floor" and 15 <= len(m.samples_ns) < 20
    assert run(TimingPolicy(max_time_s=30, noise_floor_cap_share=0)).stop_reason == "time_cap"


def test_a_target_the_cap_can_still_reach_is_not_given_up():
    """Samples with 10% spread at a 2% target need about 150: with an hour's cap left, the
    projection never stops them early."""
    import random

    rng = random.Random(5)
    spread = [int(2_000_000 * (1 + 0.1 * rng.gauss(0, 1) ** 2)) for _ in range(100_000)]
    m = measure(lambda clock: None, ScriptedClock([2_000_000] * 8 + spread, 2_000_000), TimingPolicy(max_time_s=3600))
    assert m.stop_reason == "converged"


class VirtualTime:
    """A `now` that advances by what the scripted clock says each iteration took."""

    def __init__(self, clock: ScriptedClock):
        self.t, self.clock = 0.0, clock
        original = clock.end

        def end():
            ns, phases = original()
            self.t += ns / 1e9
            return ns, phases

        clock.end = end

    def __call__(self) -> float:
        return self.t


def test_a_cold_call_that_spends_the_warm_up_budget_goes_straight_to_timing():
    # A 4 s cold call against a 1 s warm-up cap: no warm-up iteration; a 0.4 s one gets the
    # rest of the budget (0.6 s: two 0.35 s warm-up calls, the second crossing the cap).
    slow = ScriptedClock([4_000_000_000], 3_900_000_000)
    m = measure(lambda clock: None, slow, TimingPolicy(max_time_s=3, warmup_max_time_s=1), now=VirtualTime(slow))
    assert m.first_iteration_ns == 4_000_000_000 and m.warmup_ns == [] and not m.warmup_steady
    assert m.samples_ns == [3_900_000_000] * 2  # two samples pass twice the cap: stopped there
    quick = ScriptedClock([400_000_000, 350_000_000, 300_000_000], 300_000_000)
    m = measure(lambda clock: None, quick, TimingPolicy(max_time_s=3, warmup_max_time_s=1), now=VirtualTime(quick))
    assert m.warmup_ns == [350_000_000, 300_000_000]


def _slow_run(samples_ns: list[int], **policy) -> list[int]:
    """Timed samples of a config whose cold call spends the warm-up budget, on virtual time."""
    clock = ScriptedClock([5_000_000_000, *samples_ns], samples_ns[-1])
    return measure(lambda c: None, clock, TimingPolicy(warmup_max_time_s=1, **policy), now=VirtualTime(clock)).samples_ns


def test_slow_iterations_stop_at_the_cap_overrun():
    # 0.9 s iterations under a 2 s cap: six would take 5.4 s. At 2x the cap that is five
    # samples (4.5 s crosses 4 s); at 1.5x, four (3.6 s crosses 3 s).
    assert len(_slow_run([900_000_000] * 20, max_time_s=2)) == 5
    assert len(_slow_run([900_000_000] * 20, max_time_s=2, cap_overrun=1.5)) == 4
    with pytest.raises(ValueError, match="cap_overrun"):
        TimingPolicy(cap_overrun=0.5)


def test_slow_iterations_that_agree_stop_at_the_cap_and_ones_that_do_not_run_on():
    agree = [900_000_000, 910_000_000, 905_000_000] + [900_000_000] * 20
    assert len(_slow_run(agree, max_time_s=2, cap_agreement=0.03)) == 3  # 2.7 s, all within 3%
    # A bimodal config (one 1.8 s iteration among 0.9 s ones) runs on to the overrun limit.
    bimodal = [900_000_000, 1_800_000_000, 900_000_000] + [900_000_000] * 20
    assert len(_slow_run(bimodal, max_time_s=2, cap_agreement=0.03)) == 4
    # Off by default: the same agreeing samples wait for the 2x overrun.
    assert len(_slow_run(agree, max_time_s=2)) == 5


def _touch_fresh_pages(size: int) -> None:
    """Map `size` bytes of fresh anonymous memory in small pages (an allocator or transparent
    huge pages would otherwise decide how many faults there are) and write to every page."""
    import mmap

    region = mmap.mmap(-1, size)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        region.madvise(mmap.MADV_NOHUGEPAGE)
    for offset in range(0, size, mmap.PAGESIZE):
        region[offset] = 1
    region.close()


def test_the_timed_samples_page_faults_are_counted():
    """A step that touches fresh memory each call faults on every page it touches; a step that
    allocates nothing does not. The count covers the timed samples only, not the cold call or
    the warm-up."""
    import mmap

    from benchmark_runners.harness import minor_faults

    if minor_faults() is None:
        pytest.skip("no getrusage on this platform: page faults are not counted here")
    pages = 4096
    policy = TimingPolicy(ci_target=0.0, min_iterations=5, max_iterations=5, warmup_max_iterations=2, warmup_max_time_s=0.05)
    fresh = measure(lambda clock: _touch_fresh_pages(pages * mmap.PAGESIZE), HostClock(), policy)
    assert len(fresh.samples_ns) == 5
    assert fresh.timed_minor_faults / 5 >= 0.9 * pages
    quiet = measure(lambda clock: None, HostClock(), policy)
    assert quiet.timed_minor_faults / 5 < 0.05 * pages


def test_a_check_that_falls_past_the_cap_stops_at_the_time_cap():
    """The first check the noise-floor rule may make (15 samples) lands past the 15 s cap: no
    time is left to project into, so the cap is what stopped the measurement and the row says
    `time_cap`, not `noise_floor`."""
    elapsed = [0.0]

    class VirtualClock(ScriptedClock):
        def end(self):
            ns, phases = super().end()
            elapsed[0] += ns / 1e9
            return ns, phases

    second = 1_000_000_000
    bimodal = [3 * second // 2 if i % 2 == 0 else second // 2 for i in range(100)]
    clock = VirtualClock([second, second, second] + bimodal, second)
    m = measure(lambda c: None, clock, TimingPolicy(max_time_s=15), now=lambda: elapsed[0])
    assert len(m.samples_ns) == 15 and sum(m.samples_ns) / 1e9 >= 15
    assert m.stop_reason == "time_cap"

//! Steady reads take turns: a clock per namespace that every read moves on by one token's
//! time, so reads at rest are spread at the budget's rate behind the moving ones.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Steady reads are paced: at most this many are due within the time the budget takes to grant
/// them, so at most about this many reconciles wait for a token at the steady priority at once.
/// The others are requeued at their turn, holding no reconcile slot meanwhile, so a spec
/// change or a rollout in motion finds a free slot and goes ahead even while thousands at rest
/// wait for their first read after a restart. One that waits longer than twice this many
/// tokens' time (moving reads went first) gives its wait up and comes back at a new turn.
pub const STEADY_SEATS: u32 = 4;

/// The turn of each steady read, per Temporal namespace: a clock that every read moves on by
/// one token's time, so steady reads are spread at the budget's rate behind the moving ones.
#[derive(Default)]
pub(super) struct Turns {
    /// When the namespace's budget is next expected to have a token nobody asked for.
    pub(super) next: HashMap<(String, String), Instant>,
    /// WorkerDeployments (`namespace/name`) given a later turn, and when it comes.
    pub(super) given: HashMap<String, Instant>,
}

/// Whether a steady read goes now or at a later turn.
#[derive(Debug, PartialEq)]
pub(super) enum Turn {
    Now,
    At(Instant),
}

/// The turn of a steady read given `given` (its turn from before, if any), against the
/// namespace's clock `next`, with `spacing` per token and up to `seats` reads waiting.
pub(super) fn turn(
    next: &mut Instant,
    given: Option<Instant>,
    now: Instant,
    spacing: Duration,
    seats: u32,
) -> Turn {
    if let Some(at) = given {
        return if at <= now { Turn::Now } else { Turn::At(at) };
    }
    let at = step(next, now, spacing);
    if at <= now + spacing * seats {
        Turn::Now
    } else {
        Turn::At(at)
    }
}

/// Moves the namespace's clock `next` on by one token: returns the instant that token is due.
pub(super) fn step(next: &mut Instant, now: Instant, spacing: Duration) -> Instant {
    let at = (*next).max(now);
    *next = at + spacing;
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_reads_take_turns_at_the_budgets_pace_and_keep_them() {
        let now = Instant::now();
        let spacing = Duration::from_millis(50); // 20 per second
        let mut next = now;
        // The first seats go now; the one after gets a turn one spacing later each.
        let turns: Vec<Turn> = (0..12)
            .map(|_| turn(&mut next, None, now, spacing, 8))
            .collect();
        assert!(turns[..9].iter().all(|t| *t == Turn::Now), "{turns:?}");
        assert_eq!(turns[9], Turn::At(now + spacing * 9));
        assert_eq!(turns[11], Turn::At(now + spacing * 11));
        assert_eq!(next, now + spacing * 12);
        // Back before its turn (another trigger): still later, and the clock does not move.
        let early = turn(&mut next, Some(now + spacing * 9), now, spacing, 8);
        assert_eq!(early, Turn::At(now + spacing * 9));
        assert_eq!(next, now + spacing * 12);
        // Back at its turn: now.
        assert_eq!(
            turn(
                &mut next,
                Some(now + spacing * 9),
                now + spacing * 9,
                spacing,
                8
            ),
            Turn::Now
        );
        // After a quiet spell the clock starts from now again.
        let later = now + Duration::from_secs(10);
        assert_eq!(turn(&mut next, None, later, spacing, 8), Turn::Now);
        assert_eq!(next, later + spacing);
    }
}

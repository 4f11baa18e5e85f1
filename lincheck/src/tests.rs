//! The checker on a register, with histories known to be linearizable or not, hand-made and
//! generated.

use proptest::prelude::*;

use super::*;

/// A register holding a number, initially 0.
struct Register;

#[derive(Clone, Debug, PartialEq)]
enum Call {
    Read,
    Write(u32),
    /// Compare-and-set: from the first to the second; answers whether it swapped.
    Cas(u32, u32),
}

#[derive(Clone, Debug, PartialEq)]
enum Answer {
    Value(u32),
    Done,
    Swapped(bool),
}

impl Model for Register {
    type State = u32;
    type Input = Call;
    type Output = Answer;

    fn init(&self) -> u32 {
        0
    }

    fn step(&self, state: &u32, input: &Call, output: Option<&Answer>) -> Option<u32> {
        let (next, answer) = match *input {
            Call::Read => (*state, Answer::Value(*state)),
            Call::Write(v) => (v, Answer::Done),
            Call::Cas(from, to) if from == *state => (to, Answer::Swapped(true)),
            Call::Cas(..) => (*state, Answer::Swapped(false)),
        };
        match output {
            Some(seen) if *seen != answer => None,
            _ => Some(next),
        }
    }
}

fn op(client: usize, input: Call, call: u64, answer: Answer, at: u64) -> Operation<Call, Answer> {
    Operation {
        client,
        input,
        call,
        outcome: Outcome::Returned { output: answer, at },
    }
}

fn lost(client: usize, input: Call, call: u64) -> Operation<Call, Answer> {
    Operation {
        client,
        input,
        call,
        outcome: Outcome::Unknown,
    }
}

fn verdict(history: &[Operation<Call, Answer>]) -> Verdict {
    check(&Register, history, None)
}

#[test]
fn an_empty_history_is_linearizable() {
    assert_eq!(verdict(&[]), Verdict::Linearizable { order: vec![] });
}

#[test]
fn a_read_overlapping_a_write_may_see_either_value() {
    for seen in [0, 1] {
        let h = [
            op(0, Call::Write(1), 0, Answer::Done, 10),
            op(1, Call::Read, 2, Answer::Value(seen), 5),
        ];
        assert!(verdict(&h).is_linearizable(), "read saw {seen}");
    }
}

#[test]
fn a_read_after_a_write_returned_must_see_it() {
    let h = [
        op(0, Call::Write(1), 0, Answer::Done, 10),
        op(1, Call::Read, 11, Answer::Value(0), 12),
    ];
    let Verdict::NotLinearizable(why) = verdict(&h) else {
        panic!("a stale read passed");
    };
    assert_eq!(why.blocked, 1);
}

#[test]
fn once_a_read_saw_the_new_value_no_later_read_sees_the_old() {
    // Both reads overlap the write, yet they do not overlap each other: sequentially consistent
    // (the second client might lag), but not linearizable.
    let h = [
        op(0, Call::Write(1), 0, Answer::Done, 100),
        op(1, Call::Read, 10, Answer::Value(1), 20),
        op(2, Call::Read, 30, Answer::Value(0), 40),
    ];
    assert!(matches!(verdict(&h), Verdict::NotLinearizable(_)));
    // The other way round is fine: the write took effect between the reads.
    let h = [
        op(0, Call::Write(1), 0, Answer::Done, 100),
        op(1, Call::Read, 10, Answer::Value(0), 20),
        op(2, Call::Read, 30, Answer::Value(1), 40),
    ];
    assert_eq!(
        verdict(&h),
        Verdict::Linearizable {
            order: vec![1, 0, 2]
        }
    );
}

#[test]
fn a_value_nobody_wrote_is_never_read() {
    let h = [
        op(0, Call::Write(1), 0, Answer::Done, 10),
        op(1, Call::Read, 0, Answer::Value(2), 10),
    ];
    assert!(matches!(verdict(&h), Verdict::NotLinearizable(_)));
}

#[test]
fn two_compare_and_sets_from_the_same_value_cannot_both_win() {
    let h = [
        op(0, Call::Cas(0, 1), 0, Answer::Swapped(true), 10),
        op(1, Call::Cas(0, 2), 0, Answer::Swapped(true), 10),
    ];
    assert!(matches!(verdict(&h), Verdict::NotLinearizable(_)));
    let h = [
        op(0, Call::Cas(0, 1), 0, Answer::Swapped(true), 10),
        op(1, Call::Cas(0, 2), 0, Answer::Swapped(false), 10),
        op(2, Call::Read, 11, Answer::Value(1), 12),
    ];
    assert!(verdict(&h).is_linearizable());
}

#[test]
fn an_unanswered_write_may_have_happened_or_not_but_only_once() {
    // Seen, then seen again: it happened.
    let h = [
        lost(0, Call::Write(1), 0),
        op(1, Call::Read, 5, Answer::Value(1), 6),
        op(1, Call::Read, 7, Answer::Value(1), 8),
    ];
    assert!(verdict(&h).is_linearizable());
    // Never seen: it never happened.
    let h = [
        lost(0, Call::Write(1), 0),
        op(1, Call::Read, 5, Answer::Value(0), 6),
    ];
    assert_eq!(verdict(&h), Verdict::Linearizable { order: vec![1] });
    // Seen, then gone again with no other write: impossible.
    let h = [
        lost(0, Call::Write(1), 0),
        op(1, Call::Read, 5, Answer::Value(1), 6),
        op(1, Call::Read, 7, Answer::Value(0), 8),
    ];
    assert!(matches!(verdict(&h), Verdict::NotLinearizable(_)));
}

#[test]
fn a_write_lost_with_its_server_happened_before_the_crash_or_never() {
    let lost_by = |client, input, call, by| Operation {
        client,
        input,
        call,
        outcome: Outcome::Lost { by },
    };
    // Seen before the crash, or not at all: both fine.
    let h = [
        lost_by(0, Call::Write(1), 0, 10),
        op(1, Call::Read, 2, Answer::Value(1), 3),
        op(1, Call::Read, 20, Answer::Value(1), 21),
    ];
    assert!(verdict(&h).is_linearizable());
    let h = [
        lost_by(0, Call::Write(1), 0, 10),
        op(1, Call::Read, 20, Answer::Value(0), 21),
    ];
    assert_eq!(verdict(&h), Verdict::Linearizable { order: vec![1] });
    // Not seen before the crash but seen after it: it came back from the dead.
    let h = [
        lost_by(0, Call::Write(1), 0, 10),
        op(1, Call::Read, 11, Answer::Value(0), 12),
        op(1, Call::Read, 20, Answer::Value(1), 21),
    ];
    assert!(matches!(verdict(&h), Verdict::NotLinearizable(_)));
    // The same history is fine when the outcome is merely unknown (the server lives on).
    let h = [
        lost(0, Call::Write(1), 0),
        op(1, Call::Read, 11, Answer::Value(0), 12),
        op(1, Call::Read, 20, Answer::Value(1), 21),
    ];
    assert!(verdict(&h).is_linearizable());
    // A lost compare-and-set that must have happened for a later read to make sense.
    let h = [
        op(0, Call::Write(5), 0, Answer::Done, 1),
        lost_by(1, Call::Cas(5, 6), 2, 10),
        op(2, Call::Read, 11, Answer::Value(6), 12),
    ];
    assert_eq!(
        verdict(&h),
        Verdict::Linearizable {
            order: vec![0, 1, 2]
        }
    );
}

#[test]
fn an_operation_cannot_take_effect_before_its_call() {
    let h = [
        op(0, Call::Read, 0, Answer::Value(1), 5),
        op(1, Call::Write(1), 6, Answer::Done, 7),
    ];
    assert!(matches!(verdict(&h), Verdict::NotLinearizable(_)));
}

#[test]
fn the_counterexample_names_the_longest_prefix_and_the_blocked_operation() {
    let h = [
        op(0, Call::Write(1), 0, Answer::Done, 1),
        op(0, Call::Write(2), 2, Answer::Done, 3),
        op(1, Call::Read, 4, Answer::Value(1), 5),
    ];
    let Verdict::NotLinearizable(why) = verdict(&h) else {
        panic!("a stale read passed");
    };
    assert_eq!(why.prefix, vec![0, 1]);
    assert_eq!(why.blocked, 2);
}

#[test]
fn a_budget_stops_a_search_too_large_to_finish() {
    // Many overlapping writes of distinct values and a final read of a value none wrote: the
    // search must try every order before saying no, far beyond a zero budget.
    let mut h: Vec<_> = (0..40)
        .map(|i| op(i, Call::Write(i as u32 + 1), 0, Answer::Done, 1000))
        .collect();
    h.push(op(99, Call::Read, 1001, Answer::Value(999), 1002));
    assert_eq!(
        check(&Register, &h, Some(Duration::ZERO)),
        Verdict::Undecided
    );
}

#[test]
fn a_recorder_stamps_calls_and_answers_and_leaves_the_unanswered_unknown() {
    let recorder = Recorder::new();
    let a = recorder.call(0, Call::Write(1));
    let b = recorder.call(1, Call::Read);
    recorder.returned(a, Answer::Done);
    let history = recorder.into_history();
    assert!(history[a].call <= history[b].call);
    assert!(matches!(history[a].outcome, Outcome::Returned { at, .. } if at >= history[b].call));
    assert_eq!(history[b].outcome, Outcome::Unknown);
}

/// A random run of the register by several clients: each operation takes effect at one instant
/// inside its interval, so the history is linearizable by construction.
fn run(steps: &[(usize, u8, u32, u8, u8)]) -> Vec<Operation<Call, Answer>> {
    let mut state = 0u32;
    let mut history = Vec::new();
    let mut clock = 0u64;
    // (client busy until, its pending operation)
    for &(client, kind, value, before, after) in steps {
        let call = clock;
        clock += before as u64 + 1;
        let input = match kind % 3 {
            0 => Call::Read,
            1 => Call::Write(value),
            _ => Call::Cas(value % 3, value),
        };
        let (next, answer) = match input {
            Call::Read => (state, Answer::Value(state)),
            Call::Write(v) => (v, Answer::Done),
            Call::Cas(from, to) if from == state => (to, Answer::Swapped(true)),
            Call::Cas(..) => (state, Answer::Swapped(false)),
        };
        state = next;
        history.push(op(client, input, call, answer, clock + after as u64));
    }
    history
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn histories_made_by_a_real_register_are_linearizable(
        steps in prop::collection::vec((0usize..4, any::<u8>(), 0u32..3, 0u8..5, 0u8..20), 1..60)
    ) {
        let history = run(&steps);
        prop_assert!(check(&Register, &history, None).is_linearizable());
    }

    #[test]
    fn a_read_of_a_value_never_written_is_caught(
        steps in prop::collection::vec((0usize..4, any::<u8>(), 0u32..3, 0u8..5, 0u8..20), 1..60),
        pick in any::<prop::sample::Index>(),
    ) {
        let mut history = run(&steps);
        let reads: Vec<usize> = (0..history.len())
            .filter(|&i| history[i].input == Call::Read)
            .collect();
        prop_assume!(!reads.is_empty());
        let victim = reads[pick.index(reads.len())];
        if let Outcome::Returned { output, .. } = &mut history[victim].outcome {
            *output = Answer::Value(7);
        }
        prop_assert!(matches!(check(&Register, &history, None), Verdict::NotLinearizable(_)));
    }
}

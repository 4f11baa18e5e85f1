//! Linearizability checking: is a recorded history of concurrent operations explainable by some
//! order of the operations, one at a time, that respects real time?
//!
//! A crate of its own because two test suites check histories with it — the store's (many clients
//! against the log, with crashes) and the end-to-end tests of the API over the log — and neither the
//! store nor the API server should ship test machinery. It knows nothing of either: a [`Model`]
//! says what one operation does to a sequential state, and [`check`] searches for a linearization.
//!
//! # The search
//! Wing and Gong's algorithm with Lowe's memoisation, the approach Porcupine made popular: the
//! operations' calls and returns, sorted by time, form a list; the search takes a call from the
//! front part of the list (a call that no pending return precedes), applies it to the model, and
//! lifts the call and its return out; when the first remaining entry is a return, the operation it
//! belongs to cannot be placed anywhere later, so the search backtracks. A set of (operations
//! linearized, state) already explored is never explored again, which keeps the search polynomial
//! on the histories real systems produce.
//!
//! An operation whose client never saw an answer (a timeout, a crash of the server) has an
//! [`Outcome::Unknown`]: it may have taken effect at any moment after its call, or never; or, when
//! the server is known to have died at some moment, [`Outcome::Lost`]: it took effect before that
//! moment or never. The model decides what such a step does to the state ([`Model::step`] gets no
//! output to compare). A lost operation ends in a deadline entry: reaching it with the operation
//! still unplaced means deciding that it never happened, a choice the search can undo like any
//! other.
//!
//! ```text
//!   client 0:  |-- put x=1 --|
//!   client 1:        |-- get x -> 1 --|        linearizable: put, get, get
//!   client 2:                            |-- get x -> 1 --|
//!   client 2:                            |-- get x -> 0 --|   not: 1 was seen before it began
//! ```

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A sequential specification: what one operation does to the state and what it answers.
pub trait Model {
    /// The sequential state. Compared and hashed for memoisation, so keep it small.
    type State: Clone + Eq + Hash + Debug;
    /// What a client asked.
    type Input: Debug;
    /// What the client was answered.
    type Output: Debug;

    /// The state before any operation.
    fn init(&self) -> Self::State;

    /// The state after `input` took effect in `state`, if `output` is what it answers there;
    /// `None` if the operation cannot have answered `output` in `state`. With no `output` (the
    /// outcome is unknown) the step is whatever the operation does in `state`; the model must be
    /// deterministic given the state and the input.
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: Option<&Self::Output>,
    ) -> Option<Self::State>;
}

/// How an operation ended, as its client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome<O> {
    /// The client got `output` at time `at`.
    Returned {
        /// The answer.
        output: O,
        /// When it arrived (same clock as [`Operation::call`]).
        at: u64,
    },
    /// No answer: the operation may have taken effect at any time after its call, or never.
    Unknown,
    /// No answer, and the server that had it died at time `by`: the operation took effect
    /// between its call and `by`, or never.
    Lost {
        /// When the server died (same clock as [`Operation::call`]).
        by: u64,
    },
}

impl<O> Outcome<O> {
    fn output(&self) -> Option<&O> {
        match self {
            Outcome::Returned { output, .. } => Some(output),
            Outcome::Unknown | Outcome::Lost { .. } => None,
        }
    }

    /// Where the operation's second entry in the time-ordered list goes, and its kind.
    fn end(&self) -> Option<(u64, End)> {
        match *self {
            Outcome::Returned { at, .. } => Some((at, End::Return)),
            Outcome::Lost { by } => Some((by, End::Deadline)),
            Outcome::Unknown => None,
        }
    }
}

/// One operation of a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation<I, O> {
    /// Who issued it (for reports only: the search needs no client order beyond the times).
    pub client: usize,
    /// What was asked.
    pub input: I,
    /// When it was issued, in any monotonic unit shared by the whole history.
    pub call: u64,
    /// How it ended.
    pub outcome: Outcome<O>,
}

/// What [`check`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The history is linearizable; `order` is one linearization (indices into the history).
    /// Operations with an unknown outcome that are not in it never took effect.
    Linearizable {
        /// The operations in their linearization order.
        order: Vec<usize>,
    },
    /// No order explains the history.
    NotLinearizable(Counterexample),
    /// The search ran past its time budget without deciding.
    Undecided,
}

impl Verdict {
    /// Whether the history was shown linearizable.
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable { .. })
    }
}

/// The furthest the search got: a longest linearizable prefix and the operation that could not
/// follow it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counterexample {
    /// The longest order of operations found that explains the history up to `blocked`'s return.
    pub prefix: Vec<usize>,
    /// An operation that had returned and could be placed after no extension of `prefix`.
    pub blocked: usize,
}

/// Searches for a linearization of `history` under `model`, for at most `budget`.
pub fn check<M: Model>(
    model: &M,
    history: &[Operation<M::Input, M::Output>],
    budget: Option<Duration>,
) -> Verdict {
    let started = Instant::now();
    let mut list = Entries::new(history);
    let mut state = model.init();
    let mut linearized = Bits::new(history.len());
    let mut seen: HashSet<(Bits, M::State)> = HashSet::new();
    let mut stack: Vec<Placed<M::State>> = Vec::new();
    // Operations still to be placed (returned) or decided (lost).
    let mut ends_left = history
        .iter()
        .filter(|op| op.outcome.end().is_some())
        .count();
    let mut furthest = Counterexample {
        prefix: Vec::new(),
        blocked: 0,
    };
    let mut cursor = list.first();
    let mut steps: u64 = 0;
    loop {
        if ends_left == 0 {
            return Verdict::Linearizable {
                order: stack
                    .into_iter()
                    .filter(|placed| placed.took_effect)
                    .map(|placed| placed.op)
                    .collect(),
            };
        }
        steps += 1;
        if steps % 4096 == 0 && budget.is_some_and(|b| started.elapsed() > b) {
            return Verdict::Undecided;
        }
        // An end is left (ends_left > 0), so the scan meets one before the list's end.
        debug_assert_ne!(cursor, list.head());
        let entry = list.entries[cursor];
        // The state after this entry's operation, if it can be placed here: a call takes effect
        // now; a lost operation's deadline, reached with the operation unplaced, means it never
        // took effect.
        let placed = match entry.kind {
            Kind::Call => {
                let op = &history[entry.op];
                model
                    .step(&state, &op.input, op.outcome.output())
                    .map(|next| (next, true))
            }
            Kind::End(End::Deadline) => Some((state.clone(), false)),
            Kind::End(End::Return) => None,
        };
        if let Some((next, took_effect)) = placed {
            let mut bits = linearized.clone();
            bits.set(entry.op);
            if seen.insert((bits.clone(), next.clone())) {
                stack.push(Placed {
                    op: entry.op,
                    before: std::mem::replace(&mut state, next),
                    at: list.positions[entry.op].0,
                    took_effect,
                });
                linearized = bits;
                if history[entry.op].outcome.end().is_some() {
                    ends_left -= 1;
                }
                list.lift(entry.op);
                cursor = list.first();
                continue;
            }
            if took_effect {
                cursor = list.next[cursor];
                continue;
            }
        } else if entry.kind == Kind::Call {
            cursor = list.next[cursor];
            continue;
        }
        // The first end left: its operation must be placed before anything later, and no
        // placement of the calls before it worked. Undo the newest choice and try the next.
        if stack.len() >= furthest.prefix.len() {
            furthest = Counterexample {
                prefix: stack
                    .iter()
                    .filter(|p| p.took_effect)
                    .map(|p| p.op)
                    .collect(),
                blocked: entry.op,
            };
        }
        let Some(undone) = stack.pop() else {
            return Verdict::NotLinearizable(furthest);
        };
        list.unlift(undone.op);
        linearized.clear(undone.op);
        if history[undone.op].outcome.end().is_some() {
            ends_left += 1;
        }
        state = undone.before;
        cursor = list.next[undone.at];
    }
}

/// A choice of the search: an operation placed (or, for a lost one, decided never to happen).
struct Placed<S> {
    op: usize,
    /// The state before it.
    before: S,
    /// The list position of its call, where the search goes on after undoing it.
    at: usize,
    /// Whether it took effect (false: a lost operation that never happened).
    took_effect: bool,
}

/// One call or end in the time-ordered list.
#[derive(Clone, Copy, Debug)]
struct Entry {
    op: usize,
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Call,
    End(End),
}

/// How an operation's interval ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum End {
    /// Its answer arrived.
    Return,
    /// Its server died: placed before this or never.
    Deadline,
}

/// The calls and returns sorted by time, as a doubly linked list over an array (index `len` is
/// the head sentinel) from which an operation's two entries can be lifted and put back.
struct Entries {
    entries: Vec<Entry>,
    next: Vec<usize>,
    prev: Vec<usize>,
    /// Per operation: the positions of its call and (if it has one) its end.
    positions: Vec<(usize, Option<usize>)>,
}

impl Entries {
    fn new<I, O>(history: &[Operation<I, O>]) -> Entries {
        let mut timed: Vec<(u64, Kind, usize)> = Vec::with_capacity(history.len() * 2);
        for (i, op) in history.iter().enumerate() {
            // At equal times a call sorts before an end: the two are taken as overlapping,
            // the reading that accuses nobody on a coarse clock.
            timed.push((op.call, Kind::Call, i));
            if let Some((at, end)) = op.outcome.end() {
                assert!(at >= op.call, "operation {i} ended before it was called");
                timed.push((at, Kind::End(end), i));
            }
        }
        timed.sort();
        let len = timed.len();
        let mut positions = vec![(usize::MAX, None); history.len()];
        let entries: Vec<Entry> = timed
            .iter()
            .enumerate()
            .map(|(at, &(_, kind, op))| {
                if kind == Kind::Call {
                    positions[op].0 = at;
                } else {
                    positions[op].1 = Some(at);
                }
                Entry { op, kind }
            })
            .collect();
        let next = (0..=len)
            .map(|i| if i == len { 0 } else { i + 1 })
            .collect();
        let prev = (0..=len)
            .map(|i| if i == 0 { len } else { i - 1 })
            .collect();
        let mut list = Entries {
            entries,
            next,
            prev,
            positions,
        };
        if len == 0 {
            list.next[0] = 0;
            list.prev[0] = 0;
        }
        list
    }

    fn head(&self) -> usize {
        self.entries.len()
    }

    fn first(&self) -> usize {
        self.next[self.head()]
    }

    fn unlink(&mut self, at: usize) {
        let (p, n) = (self.prev[at], self.next[at]);
        self.next[p] = n;
        self.prev[n] = p;
    }

    fn relink(&mut self, at: usize) {
        let (p, n) = (self.prev[at], self.next[at]);
        self.next[p] = at;
        self.prev[n] = at;
    }

    /// Takes an operation's call and end out of the list.
    fn lift(&mut self, op: usize) {
        let (call, ret) = self.positions[op];
        self.unlink(call);
        if let Some(ret) = ret {
            self.unlink(ret);
        }
    }

    /// Puts back what [`Entries::lift`] took (the newest lift first, as the search does).
    fn unlift(&mut self, op: usize) {
        let (call, ret) = self.positions[op];
        if let Some(ret) = ret {
            self.relink(ret);
        }
        self.relink(call);
    }
}

/// A set of operation indices.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }

    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

/// Records a history as clients run: each operation is stamped on one clock when it is issued and
/// when its answer arrives. Operations never finished stay [`Outcome::Unknown`].
pub struct Recorder<I, O> {
    origin: Instant,
    ops: Mutex<Vec<Operation<I, O>>>,
}

impl<I, O> Default for Recorder<I, O> {
    fn default() -> Self {
        Recorder {
            origin: Instant::now(),
            ops: Mutex::new(Vec::new()),
        }
    }
}

impl<I, O> Recorder<I, O> {
    /// A recorder whose clock starts now.
    pub fn new() -> Recorder<I, O> {
        Recorder::default()
    }

    /// Nanoseconds since the recorder was made.
    pub fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// Records that `client` issues `input` now; returns the ticket to finish it with.
    pub fn call(&self, client: usize, input: I) -> usize {
        let mut ops = self.ops.lock().unwrap();
        // Stamped under the lock, so tickets are in call order.
        let call = self.now();
        ops.push(Operation {
            client,
            input,
            call,
            outcome: Outcome::Unknown,
        });
        ops.len() - 1
    }

    /// Records the answer to the operation of `ticket`, stamped now.
    pub fn returned(&self, ticket: usize, output: O) {
        let at = self.now();
        self.ops.lock().unwrap()[ticket].outcome = Outcome::Returned { output, at };
    }

    /// The history recorded so far.
    pub fn into_history(self) -> Vec<Operation<I, O>> {
        self.ops.into_inner().unwrap()
    }
}

#[cfg(test)]
mod tests;

//! The scenarios: how the control plane answers (a plan per scenario) and what the runner must
//! have done (checks, each naming the duty of docs/protocol.md §6.4 it checks).
//!
//! The model's runner is abstract (it stops executing at its own lease's end, `runner_expiry`, or
//! when told; `Action::StopExecuting`), and its messages carry no network behaviour (late answers,
//! hangs, statuses), which is what these scenarios vary; so they are written by hand, one or more
//! per row of the duty table, and named after the row.

/// A runner route (`/v1/runner/...`); both result routes are `Result`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Claim,
    Heartbeat,
    Rejoin,
    Source,
    Logs,
    ArtifactPut,
    Result,
}

/// What the control plane knows when a request arrives.
#[derive(Clone, Copy, Debug)]
pub struct View {
    /// The receipt time ([`super::control_plane::uptime`]).
    pub now: f64,
    /// A claim was received before.
    pub claimed: bool,
    /// The latest lease end the runner may rightly reckon, so far.
    pub lease_end: Option<f64>,
    /// Heartbeats received before this one.
    pub heartbeats: usize,
    /// Results received before this one.
    pub results: usize,
    /// The command has ticked.
    pub ticking: bool,
}

/// How the control plane answers one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// What a control plane that accepts everything answers (a claim grants the scenario's next
    /// job, or `no_queued_job`).
    Default,
    /// A heartbeat accepted with `cancel_requested`, a rejoin answered `cancel`.
    CancelRequested,
    /// A `409` rejection with this reason.
    Rejected(&'static str),
    /// Another status with this code, and `Retry-After` when given.
    Status {
        status: u16,
        code: &'static str,
        retry_after: Option<u64>,
    },
    /// This answer, this many seconds late.
    Late(f64, Box<Reply>),
    /// This answer once the command has ticked (bounded).
    AfterTicks(Box<Reply>),
    /// Never answered.
    Hang,
}

/// One scenario.
pub struct Scenario {
    pub name: &'static str,
    /// What it plays, in a sentence.
    pub what: &'static str,
    pub ttl_ms: u64,
    /// The runner's capacity and how many jobs it runs before it exits (`LEASEWRIGHT_CAPACITY`,
    /// `LEASEWRIGHT_MAX_JOBS`).
    pub capacity: u32,
    pub max_jobs: u32,
    /// How many jobs the control plane has to give.
    pub jobs: usize,
    /// The command ticks this many times (every 50 ms) and exits 0; `None`: until stopped.
    pub command_ticks: Option<u32>,
    /// The command also prints each tick on its standard output: the runner has log chunks to
    /// append all along.
    pub prints: bool,
    /// Send the runner SIGTERM once the command ticks.
    pub sigterm: bool,
    /// The longest the scenario runs, in seconds: a bound on a runner that never exits (a runner
    /// that exits ends its scenario sooner), generous for a starved machine.
    pub budget_s: f64,
    pub plan: fn(&View, Route) -> Reply,
    pub check: fn(&Outcome, &mut Checks),
}

impl Scenario {
    /// What a scenario plays unless it says otherwise (`..Scenario::DEFAULT`): a lease of 6 s,
    /// a runner of capacity 1 that runs one job and exits, a command that ticks until stopped,
    /// no SIGTERM, at most 30 s. Each scenario names itself and sets its plan and its check.
    const DEFAULT: Scenario = Scenario {
        name: "",
        what: "",
        ttl_ms: 6000,
        capacity: 1,
        max_jobs: 1,
        jobs: 1,
        command_ticks: None,
        prints: false,
        sigterm: false,
        budget_s: 30.0,
        plan: |_, _| Reply::Default,
        check: |_, _| {},
    };
}

/// What the runner did in a scenario.
#[derive(Debug)]
pub struct Outcome {
    pub records: Vec<super::control_plane::Record>,
    /// The latest lease end the runner could rightly reckon.
    pub lease_end: Option<f64>,
    /// The command's ticks (its own [`super::control_plane::uptime`] readings).
    pub ticks: Vec<f64>,
    /// When the runner process exited, and its exit code.
    pub exited: Option<(f64, Option<i32>)>,
    /// The command was still running this long after the runner exited (`None`: it was not
    /// running when the runner exited, or it did not exit).
    pub command_outlived_exit_s: Option<f64>,
    /// When the suite sent SIGTERM.
    pub sigterm_at: Option<f64>,
    /// The runner's stderr and stdout, for the report.
    pub log_path: std::path::PathBuf,
}

impl Outcome {
    /// The first answer with this route and code: its time.
    pub fn first_answer(&self, route: Route, code: &str) -> Option<f64> {
        self.records
            .iter()
            .filter(|r| r.route == route)
            .filter_map(|r| r.answered.as_ref())
            .filter(|(_, _, c)| c == code)
            .map(|(at, _, _)| *at)
            .reduce(f64::min)
    }

    /// The first answer of any route with this code: its time.
    pub fn first_code(&self, code: &str) -> Option<f64> {
        self.records
            .iter()
            .filter_map(|r| r.answered.as_ref())
            .filter(|(_, _, c)| c == code)
            .map(|(at, _, _)| *at)
            .reduce(f64::min)
    }

    /// How many requests of `route` were received after `at`.
    pub fn sent_after(&self, route: Route, at: f64) -> usize {
        self.records
            .iter()
            .filter(|r| r.route == route && r.received > at)
            .count()
    }

    pub fn results(&self) -> Vec<&super::control_plane::Record> {
        self.records
            .iter()
            .filter(|r| r.route == Route::Result)
            .collect()
    }

    pub fn last_tick(&self) -> Option<f64> {
        self.ticks.iter().copied().reduce(f64::max)
    }
}

/// The verdicts of one scenario, each naming its duty.
pub struct Checks {
    pub margin_s: f64,
    pub verdicts: Vec<(&'static str, Status, String)>,
}

/// A verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Held,
    Violated,
    /// The scenario could not exercise the duty (the runner did something else first); says
    /// nothing about the duty.
    NotExercised,
}

impl Checks {
    fn verdict(&mut self, duty: &'static str, held: bool, detail: String) {
        let status = if held { Status::Held } else { Status::Violated };
        self.verdicts.push((duty, status, detail));
    }

    fn not_exercised(&mut self, duty: &'static str, detail: String) {
        self.verdicts.push((duty, Status::NotExercised, detail));
    }

    /// The command ran, and its last tick came by `deadline` plus the margin.
    fn stopped_by(&mut self, duty: &'static str, o: &Outcome, deadline: Option<f64>, what: &str) {
        let Some(deadline) = deadline else {
            self.not_exercised(duty, format!("{what} never came"));
            return;
        };
        let Some(last) = o.last_tick() else {
            // A runner may rightly never start the command (its lease ended first, on a slow
            // machine): nothing to judge.
            self.not_exercised(duty, "the command never ran".into());
            return;
        };
        let late = last - deadline;
        self.verdict(
            duty,
            late <= self.margin_s,
            format!(
                "the work's last tick came {} {what} (allowed: {:.2} s after)",
                signed(late),
                self.margin_s
            ),
        );
    }

    /// The command ran to its own end (all its ticks), never stopped by the runner.
    fn ran_to_its_end(&mut self, duty: &'static str, o: &Outcome, ticks: u32) {
        let ran = o.ticks.len();
        self.verdict(
            duty,
            ran >= ticks as usize,
            format!("the command ticked {ran} of its {ticks} times"),
        );
    }

    /// The runner exited, and no command of its was left running after that.
    fn exited_without_a_live_command(&mut self, duty: &'static str, o: &Outcome) {
        match (o.exited, o.command_outlived_exit_s) {
            (None, _) => self.verdict(duty, false, "the runner did not exit".into()),
            (Some(_), Some(outlived)) => self.verdict(
                duty,
                false,
                format!("the runner exited while its command ran on ({outlived:.2} s after and still running)"),
            ),
            (Some((at, code)), None) => {
                let after_last = o.last_tick().map_or(0.0, |last| at - last);
                self.verdict(
                    duty,
                    true,
                    format!(
                        "the runner exited (code {}) {after_last:.2} s after its command's last tick",
                        code.map_or("none".into(), |c| c.to_string())
                    ),
                );
            }
        }
    }
}

fn signed(seconds: f64) -> String {
    if seconds >= 0.0 {
        format!("{seconds:.2} s after")
    } else {
        format!("{:.2} s before", -seconds)
    }
}

fn hold(reply: Reply) -> Reply {
    Reply::AfterTicks(Box::new(reply))
}

const UNAVAILABLE: Reply = Reply::Status {
    status: 503,
    code: "database_unavailable",
    retry_after: None,
};

/// Accepts every heartbeat until the command ticks; from then on every heartbeat, rejoin and
/// result gets `reply`.
fn after_ticking(view: &View, route: Route, reply: Reply) -> Reply {
    match route {
        Route::Heartbeat if !view.ticking => Reply::Default,
        Route::Heartbeat | Route::Rejoin | Route::Result => reply,
        _ => Reply::Default,
    }
}

/// The rejection scenarios, one per class of reasons (docs/protocol.md §6.1): identity, standing,
/// a forgotten claim.
macro_rules! rejection {
    ($name:literal, $reason:literal, $what:literal) => {
        Scenario {
            name: $name,
            what: $what,
            plan: |view, route| after_ticking(view, route, Reply::Rejected($reason)),
            check: |o, c| {
                let rejected = o.first_answer(Route::Heartbeat, $reason);
                c.stopped_by(
                    "rejection-stops-at-once",
                    o,
                    rejected,
                    concat!("the heartbeat's ", $reason),
                );
                if let Some(at) = rejected {
                    let again =
                        o.sent_after(Route::Heartbeat, at) + o.sent_after(Route::Rejoin, at);
                    c.verdict(
                        "rejection-stops-at-once",
                        again == 0,
                        format!("{again} heartbeats or rejoins sent after the rejection"),
                    );
                    let results = o.results().len();
                    c.verdict(
                        "rejection-stops-at-once",
                        results == 1,
                        format!("the result was sent {results} times (once: a rejection is final)"),
                    );
                }
            },
            ..Scenario::DEFAULT
        }
    };
}

/// Every scenario of the suite.
/// `hang`'s and `hang-chatty`'s control plane: every heartbeat and rejoin is never answered.
fn hang_plan(_: &View, route: Route) -> Reply {
    match route {
        Route::Heartbeat | Route::Rejoin => Reply::Hang,
        _ => Reply::Default,
    }
}

/// `hang`'s and `hang-chatty`'s verdict: the work stops at the lease's end.
fn hang_check(o: &Outcome, c: &mut Checks) {
    c.stopped_by(
        "no-answer-stops-at-lease-end",
        o,
        o.lease_end,
        "the lease's end",
    );
}

pub static SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "late-answer",
        what: "the first heartbeat after the command starts is accepted, answered 2.5 s late; every later one gets 503",
        ttl_ms: 9000,
        plan: |view, route| match route {
            Route::Heartbeat if view.heartbeats == 0 => {
                Reply::Late(2.5, Box::new(Reply::Default))
            }
            Route::Heartbeat | Route::Rejoin => UNAVAILABLE,
            Route::Result if view.lease_end.is_some_and(|end| view.now >= end) => {
                Reply::Rejected("lease_expired")
            }
            _ => Reply::Default,
        },
        check: |o, c| {
            let late = o
                .records
                .iter()
                .find(|r| r.route == Route::Heartbeat)
                .and_then(|r| r.answered.as_ref().map(|a| (r.received, a.0, a.1)));
            match late {
                Some((_, _, 200)) => c.stopped_by(
                    "accepted-renews-from-send",
                    o,
                    o.lease_end,
                    "the lease's end reckoned from the late heartbeat's sending",
                ),
                _ => c.not_exercised(
                    "accepted-renews-from-send",
                    "the runner gave up on the late answer before it came".into(),
                ),
            }
        },
        ..Scenario::DEFAULT
    },
    Scenario {
        name: "hang",
        what: "every heartbeat and rejoin is accepted and never answered",
        plan: hang_plan,
        check: hang_check,
        ..Scenario::DEFAULT
    },
    Scenario {
        name: "hang-chatty",
        what: "every heartbeat and rejoin is accepted and never answered, while the command prints a line every tick: a log append's rejoin holds the lease's one rejoin when the renewal's comes",
        prints: true,
        // A 9 s lease: a renewal that waited behind the log append's rejoin with a limit it took
        // before is at least 1.2 s late whichever rejoin went out first (docs/runner-suite.md).
        ttl_ms: 9000,
        plan: hang_plan,
        check: hang_check,
        ..Scenario::DEFAULT
    },
    Scenario {
        name: "lease-ends-mid-request",
        what: "heartbeats get 503 until 0.9 s before the lease's end, then are never answered: the lease runs out mid-request",
        ttl_ms: 9000,
        plan: |view, route| match route {
            Route::Heartbeat | Route::Rejoin => match view.lease_end {
                Some(end) if view.now >= end - 0.9 => Reply::Hang,
                _ => UNAVAILABLE,
            },
            _ => Reply::Default,
        },
        check: |o, c| {
            let hung = o
                .records
                .iter()
                .any(|r| matches!(r.route, Route::Heartbeat | Route::Rejoin) && r.answered.is_none());
            if hung {
                c.stopped_by(
                    "no-answer-stops-at-lease-end",
                    o,
                    o.lease_end,
                    "the lease's end",
                );
            } else {
                c.not_exercised(
                    "no-answer-stops-at-lease-end",
                    "no request was in flight at the lease's end".into(),
                );
            }
        },
        ..Scenario::DEFAULT
    },
    Scenario {
        name: "revoked-token",
        what: "the runner's token is revoked once the command runs: every request from then on is answered 401",
        plan: |view, route| match route {
            Route::Claim if !view.claimed => Reply::Default,
            _ if view.ticking => Reply::Status {
                status: 401,
                code: "unauthorized",
                retry_after: None,
            },
            _ => Reply::Default,
        },
        check: |o, c| {
            let refused = o.first_code("unauthorized");
            c.stopped_by(
                "unauthorized-stops-at-once",
                o,
                refused,
                "the first 401",
            );
            if let Some(at) = refused {
                let again = o.sent_after(Route::Heartbeat, at) + o.sent_after(Route::Rejoin, at);
                c.verdict(
                    "unauthorized-stops-at-once",
                    again <= 1,
                    format!("{again} heartbeats or rejoins sent after the first 401 (at most the one in flight)"),
                );
                let results = o.sent_after(Route::Result, at);
                c.verdict(
                    "unauthorized-stops-at-once",
                    results <= 1,
                    format!("the result was sent {results} times after the 401 (at most once)"),
                );
            }
        },
        ..Scenario::DEFAULT
    },
    Scenario {
        name: "unauthorized-claim",
        what: "a runner of capacity 2 runs one job; its next claim, once the command runs, is answered 401",
        capacity: 2,
        max_jobs: 2,
        plan: |view, route| match route {
            Route::Claim if view.claimed => hold(Reply::Status {
                status: 401,
                code: "unauthorized",
                retry_after: None,
            }),
            _ => Reply::Default,
        },
        check: |o, c| {
            let refused = o.first_answer(Route::Claim, "unauthorized");
            c.stopped_by(
                "unauthorized-claim-ends-the-runner",
                o,
                refused,
                "the claim's 401",
            );
            c.exited_without_a_live_command("unauthorized-claim-ends-the-runner", o);
            if let Some((_, code)) = o.exited {
                c.verdict(
                    "unauthorized-claim-ends-the-runner",
                    code.is_some_and(|code| code != 0),
                    format!(
                        "the runner's exit code: {} (not 0)",
                        code.map_or("none".into(), |c| c.to_string())
                    ),
                );
            }
        },
        ..Scenario::DEFAULT
    },
    rejection!(
        "rejected-fence_mismatch",
        "fence_mismatch",
        "the first heartbeat after the command starts is rejected fence_mismatch (identity)"
    ),
    rejection!(
        "rejected-not_current",
        "not_current",
        "the first heartbeat after the command starts is rejected not_current (a late report)"
    ),
    rejection!(
        "rejected-lease_expired",
        "lease_expired",
        "the first heartbeat after the command starts is rejected lease_expired (standing)"
    ),
    rejection!(
        "rejected-unknown_attempt",
        "unknown_attempt",
        "the first heartbeat after the command starts is rejected unknown_attempt (a claim forgotten by a failover)"
    ),
    Scenario {
        name: "cancel",
        what: "the first heartbeat after the command starts answers cancel_requested",
        plan: |view, route| match route {
            Route::Heartbeat if view.ticking => Reply::CancelRequested,
            Route::Rejoin => Reply::CancelRequested,
            _ => Reply::Default,
        },
        check: |o, c| {
            c.stopped_by(
                "cancel-stops-and-reports-cancelled",
                o,
                o.first_answer(Route::Heartbeat, "cancel_requested"),
                "the heartbeat's cancel_requested",
            );
            let outcomes: Vec<&str> = o
                .results()
                .iter()
                .filter_map(|r| r.outcome.as_ref().map(|(outcome, _)| outcome.as_str()))
                .collect();
            c.verdict(
                "cancel-stops-and-reports-cancelled",
                !outcomes.is_empty() && outcomes.iter().all(|x| *x == "cancelled"),
                format!("results sent: {outcomes:?} (expected cancelled)"),
            );
        },
        ..Scenario::DEFAULT
    },
    Scenario {
        name: "outage-503",
        what: "for 3 s after the claim every heartbeat and rejoin gets 503 without Retry-After; then all is accepted; the command runs about 4 s",
        command_ticks: Some(80),
        plan: |view, route| match route {
            Route::Heartbeat | Route::Rejoin
                if view.lease_end.is_some_and(|end| view.now < end - 3.0) =>
            {
                UNAVAILABLE
            }
            _ => Reply::Default,
        },
        check: |o, c| {
            c.ran_to_its_end("no-decision-rides-out-within-the-lease", o, 80);
            let outcomes: Vec<(String, u16)> = o
                .results()
                .iter()
                .filter_map(|r| {
                    Some((r.outcome.as_ref()?.0.clone(), r.answered.as_ref()?.1))
                })
                .collect();
            c.verdict(
                "no-decision-rides-out-within-the-lease",
                outcomes.iter().any(|(outcome, status)| outcome == "passed" && *status == 200),
                format!("results (outcome, status): {outcomes:?} (expected passed, accepted)"),
            );
        },
        ..Scenario::DEFAULT
    },
    Scenario {
        name: "retry-after",
        what: "every heartbeat and rejoin gets 503 with Retry-After: 30, far past the lease",
        plan: |_, route| match route {
            Route::Heartbeat | Route::Rejoin => Reply::Status {
                status: 503,
                code: "database_unavailable",
                retry_after: Some(30),
            },
            Route::Result => Reply::Rejected("lease_expired"),
            _ => Reply::Default,
        },
        check: |o, c| {
            c.stopped_by(
                "retry-after-never-past-the-lease",
                o,
                o.lease_end,
                "the lease's end",
            );
            let first = o
                .records
                .iter()
                .find(|r| r.route == Route::Heartbeat)
                .map(|r| r.received);
            if let Some(first) = first {
                let again = o.sent_after(Route::Heartbeat, first) + o.sent_after(Route::Rejoin, first);
                c.verdict(
                    "retry-after-never-past-the-lease",
                    again <= 2,
                    format!("{again} heartbeats or rejoins within the lease after a Retry-After of 30 s (at most 2: the last before the lease's end)"),
                );
            }
        },
        ..Scenario::DEFAULT
    },
    Scenario {
        name: "result-500-then-200",
        what: "the command runs 1 s; its first result is answered 500, the next accepted",
        command_ticks: Some(20),
        plan: |view, route| match route {
            Route::Result if view.results == 0 => Reply::Status {
                status: 500,
                code: "internal",
                retry_after: None,
            },
            _ => Reply::Default,
        },
        check: |o, c| {
            let results = o.results();
            let sent: Vec<(String, String)> =
                results.iter().filter_map(|r| r.outcome.clone()).collect();
            let same = sent.windows(2).all(|pair| pair[0] == pair[1]);
            let accepted = results
                .iter()
                .any(|r| matches!(&r.answered, Some((_, 200, code)) if code == "accepted"));
            c.verdict(
                "result-kept-until-decided",
                sent.len() >= 2 && same && accepted,
                format!(
                    "the result was sent {} times, {}, {}",
                    sent.len(),
                    if same { "the same each time" } else { "CHANGED between sends" },
                    if accepted { "and accepted" } else { "never accepted" }
                ),
            );
            c.verdict(
                "result-kept-until-decided",
                sent.first().is_some_and(|(outcome, _)| outcome == "passed"),
                format!("outcome {:?} (expected passed)", sent.first().map(|s| &s.0)),
            );
        },
        ..Scenario::DEFAULT
    },
    Scenario {
        name: "failover-forgets-the-claim",
        what: "after the claim the control plane answers 503 (Retry-After: 1) until its lease is over and swept, then unknown_attempt: a failover forgot the claim",
        plan: |view, route| match route {
            Route::Heartbeat | Route::Rejoin | Route::Result | Route::Logs => match view.lease_end {
                Some(end) if view.now >= end + 1.0 => Reply::Rejected("unknown_attempt"),
                _ => Reply::Status {
                    status: 503,
                    code: "database_unavailable",
                    retry_after: Some(1),
                },
            },
            _ => Reply::Default,
        },
        check: |o, c| {
            c.stopped_by(
                "lease-end-stops-the-work",
                o,
                o.lease_end,
                "the lease's end",
            );
            let decided = o
                .results()
                .iter()
                .any(|r| matches!(&r.answered, Some((_, 409, code)) if code == "unknown_attempt"));
            c.verdict(
                "result-kept-until-decided",
                decided,
                if decided {
                    "the result was kept until the control plane decided it (unknown_attempt)".into()
                } else {
                    "the result was never delivered once the control plane answered".into()
                },
            );
        },
        ..Scenario::DEFAULT
    },
    Scenario {
        name: "sigterm",
        what: "the runner is sent SIGTERM while its command runs",
        sigterm: true,
        plan: |_, _| Reply::Default,
        check: |o, c| {
            c.stopped_by(
                "shutdown-stops-commands-first",
                o,
                o.sigterm_at,
                "SIGTERM",
            );
            c.exited_without_a_live_command("shutdown-stops-commands-first", o);
        },
        ..Scenario::DEFAULT
    },
    Scenario {
        name: "bad-request",
        what: "every heartbeat and rejoin is answered 400 bad_request: a decision that is no verdict, renewing nothing",
        plan: |_, route| match route {
            Route::Heartbeat | Route::Rejoin => Reply::Status {
                status: 400,
                code: "bad_request",
                retry_after: None,
            },
            Route::Result => Reply::Rejected("lease_expired"),
            _ => Reply::Default,
        },
        check: |o, c| {
            c.stopped_by(
                "lease-end-stops-the-work",
                o,
                o.lease_end,
                "the lease's end",
            );
        },
        ..Scenario::DEFAULT
    },
];

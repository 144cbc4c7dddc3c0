//! Replaying a suite or a saved trace on a driver, the summary, and the report of the first
//! divergence (shrunk, saved, with the commands that replay it).

use super::*;

/// Replays the suite on `driver`, prints the summary, reports the first divergence. `all` runs
/// the property suite after the generated traces (in shard 1 only: it is one sequential run).
pub(super) async fn run_suite<D: SuiteDriver>(
    args: &ConformArgs,
    driver: Arc<D>,
) -> anyhow::Result<i32> {
    let selection = args.selection();
    let with_property = selection.with_property();
    if with_property && (args.cases == 0 || args.walk_len == 0) {
        eprintln!("error: the proptest suite needs --cases and --walk-len of at least 1");
        return Ok(2);
    }
    if args.suite == SuiteName::Proptest && args.shard != Shard::ALL {
        eprintln!(
            "error: --shard does not apply to --suite proptest (run another --seed on each machine)"
        );
        return Ok(2);
    }
    let mut batches = match generate_reporting(args) {
        Ok(batches) => batches,
        Err(code) => return Ok(code),
    };
    let mut left_out = std::collections::BTreeMap::<LeftOut, usize>::new();
    // The classes --skip names are left out whatever the driver can replay (a run that must not
    // depend on them, or shows what they alone catch); the others as the driver says.
    let skipped: Vec<LeftOut> = args.skip.iter().map(|class| class.reason()).collect();
    let mut by_skip = std::collections::BTreeSet::new();
    for batch in &mut batches {
        let model = Arc::clone(&batch.model);
        batch.traces.retain(|t| {
            // A class of the trace's own, or one the driver alone has (`LeftOut::DemoTarget`).
            let named = suite::classes(&model, t)
                .into_iter()
                .find(|class| skipped.contains(class))
                .or_else(|| {
                    driver
                        .leaves_out(&model, t)
                        .filter(|why| skipped.contains(why))
                });
            if let Some(class) = named {
                by_skip.insert(class);
            }
            match named.or_else(|| driver.leaves_out(&model, t)) {
                Some(why) => {
                    *left_out.entry(why).or_default() += 1;
                    false
                }
                None => true,
            }
        });
    }
    batches.retain(|b| !b.traces.is_empty());
    if let Some(line) = left_out_line(driver.as_ref(), &left_out, &by_skip) {
        eprintln!("{line}");
    }
    let property_model = Arc::new(LeaseModel::new(args.config()));
    let models = batches
        .iter()
        .map(|b| b.model.as_ref())
        .chain(with_property.then_some(property_model.as_ref()));
    for model in models {
        if let Err(error) = driver.accepts(model) {
            eprintln!("error: {error}");
            return Ok(2);
        }
    }
    let counts_before = driver.statement_counts();
    let mut report = replay_batches(args, Arc::clone(&driver), &batches, false, true).await;
    let first_generated = report.divergences.first().cloned();
    let property = if with_property {
        eprintln!(
            "proptest: {} cases of up to {} steps from seed {}",
            args.cases, args.walk_len, args.seed
        );
        let outcome =
            run_property_outcome(args, Arc::clone(&driver), Arc::clone(&property_model), true)
                .await;
        if let Some(reason) = &outcome.aborted {
            eprintln!("error: proptest gave up: {reason}");
            return Ok(2);
        }
        report.traces += outcome.cases;
        report.tally.absorb(&outcome.tally);
        report.cases.extend(outcome.junit.iter().cloned());
        report.divergences.extend(
            outcome
                .failure
                .iter()
                .map(|failure| failure.divergence.clone()),
        );
        report.elapsed += outcome.elapsed;
        Some(outcome)
    } else {
        None
    };
    let statements = statement_delta(counts_before, driver.statement_counts());
    let summary = Summary {
        selection: &selection,
        report: &report,
        batches: &batches,
        statements: &statements,
        not_compared: &driver.not_compared(),
    };
    let unskipped: Vec<(SkipClass, usize)> = left_out
        .iter()
        .map(|(why, n)| (SkipClass::of(*why), *n))
        .filter(|(class, _)| !args.skip.contains(class))
        .collect();
    if args.json {
        let mut doc = summary.to_json(&driver.name());
        doc["left_out"] = left_out
            .iter()
            .map(|(why, n)| (SkipClass::of(*why).name(), serde_json::Value::from(*n)))
            .collect::<serde_json::Map<_, _>>()
            .into();
        doc["left_out_unskipped"] = unskipped.iter().map(|(class, _)| class.name()).collect();
        crate::output::print_json(&doc)?;
    } else {
        print!("{}", summary.render(&driver.heading()));
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, junit::render(&report.cases))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("JUnit report: {}", path.display());
    }
    if let Some(first) = &first_generated {
        report_divergence(args, driver.as_ref(), first, &batches).await?;
        return Ok(1);
    }
    if let Some(failure) = property.as_ref().and_then(|p| p.failure.as_ref()) {
        report_property_failure(args, driver.as_ref(), &property_model, failure)?;
        return Ok(1);
    }
    if !unskipped.is_empty() {
        let classes: Vec<String> = unskipped
            .iter()
            .map(|(class, n)| format!("{} ({n} traces)", class.name()))
            .collect();
        let flags: Vec<String> = unskipped
            .iter()
            .map(|(class, _)| format!("--skip {}", class.name()))
            .collect();
        eprintln!(
            "error: incomplete: this driver left out traces the suite asked for: {}; the run \
             proves nothing about them. To accept that, name them: {}",
            classes.join(", "),
            flags.join(" ")
        );
        return Ok(EXIT_INCOMPLETE);
    }
    Ok(0)
}

/// Prints the property suite's divergence as found and as shrunk by proptest, saves the minimal
/// trace and prints the commands that replay it and generate it again.
pub(super) fn report_property_failure<D: SuiteDriver>(
    args: &ConformArgs,
    driver: &D,
    model: &LeaseModel,
    failure: &property::PropertyFailure,
) -> anyhow::Result<()> {
    eprintln!("{}", failure.original_divergence.render());
    eprintln!(
        "proptest shrank it from {} steps (divergent at step {}) to {} ({} replays); the minimal \
         divergence:\n{}",
        failure.original.steps.len(),
        failure.original_divergence.step,
        failure.minimal.steps.len(),
        failure.shrink_replays,
        failure.divergence.render()
    );
    save_divergent(args, driver, model, &failure.minimal)?;
    eprintln!(
        "generate it again: cargo run --release -- conform{} --suite proptest --seed {} \
         --cases {} --walk-len {}",
        driver.replay_options(),
        args.seed,
        args.cases,
        args.walk_len
    );
    Ok(())
}

/// Runs the property suite on `driver`, with a progress bar if `show_progress`.
pub(super) async fn run_property_outcome<D: SuiteDriver>(
    args: &ConformArgs,
    driver: Arc<D>,
    model: Arc<LeaseModel>,
    show_progress: bool,
) -> property::PropertyOutcome {
    let bar = progress_bar(
        u64::from(args.cases),
        "proptest cases",
        driver.name(),
        show_progress,
    );
    let progress = {
        let bar = bar.clone();
        move |done: u64| bar.set_position(done)
    };
    let outcome = property::run(driver, model, args.selection().property_options(), progress).await;
    bar.finish_and_clear();
    outcome
}

/// Replays `batches` on `driver`, with a progress bar if `show_progress`.
pub(super) async fn replay_batches<D: SuiteDriver>(
    args: &ConformArgs,
    driver: Arc<D>,
    batches: &[Batch],
    stop_at_first: bool,
    show_progress: bool,
) -> suite::Outcome {
    let total: u64 = batches.iter().map(|b| b.traces.len() as u64).sum();
    let bar = progress_bar(total, "traces", driver.name(), show_progress);
    let progress = {
        let bar = bar.clone();
        move |done: u64| bar.set_position(done)
    };
    let outcome = run_batches(driver, batches, args.parallel, stop_at_first, progress).await;
    bar.finish_and_clear();
    outcome
}

/// Shrinks the first divergence, saves it, and prints how to replay it.
pub(super) async fn report_divergence<D: SuiteDriver>(
    args: &ConformArgs,
    driver: &D,
    first: &Divergence,
    batches: &[Batch],
) -> anyhow::Result<()> {
    let (batch, trace) =
        select::find(batches, &first.trace).context("the divergent trace is in the suite")?;
    eprintln!("{}", first.render());
    let (shrunk, divergence) = minimize::shrink(&batch.model, driver, trace).await;
    if shrunk.steps.len() < trace.steps.len() {
        eprintln!(
            "shrunk from {} to {} steps; the minimal divergence:\n{}",
            trace.steps.len(),
            shrunk.steps.len(),
            divergence.map(|d| d.render()).unwrap_or_default()
        );
    }
    save_divergent(args, driver, &batch.model, &shrunk)
}

/// Saves `trace` (of `model`) where divergent traces go and prints how to replay it.
pub(super) fn save_divergent<D: SuiteDriver>(
    args: &ConformArgs,
    driver: &D,
    model: &LeaseModel,
    trace: &Generated<LeaseModel>,
) -> anyhow::Result<()> {
    let path = traces::save(&args.traces, model, trace).map_err(anyhow::Error::msg)?;
    eprintln!("saved trace: {}", path.display());
    eprintln!(
        "replay it:   cargo run --release -- conform{} --replay {}",
        driver.replay_options(),
        path.display()
    );
    Ok(())
}

pub(super) async fn replay_file<D: SuiteDriver>(
    args: &ConformArgs,
    driver: Arc<D>,
    file: &PathBuf,
) -> anyhow::Result<i32> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("error: cannot read {}: {error}", file.display());
            return Ok(2);
        }
    };
    let (model, trace) = match traces::from_itf(&text) {
        Ok(parsed) => parsed,
        Err(error) => {
            eprintln!(
                "error: {} is not a trace of this model: {error}",
                file.display()
            );
            return Ok(2);
        }
    };
    if let Err(error) = driver.accepts(&model) {
        eprintln!("error: {error}");
        return Ok(2);
    }
    let model = Arc::new(model);
    let batches = [Batch::new(model, vec![trace])];
    let report = replay_batches(args, driver, &batches, true, false).await;
    match report.divergences.first() {
        Some(d) => {
            println!("{}", d.render());
            Ok(1)
        }
        None => {
            println!(
                "{}: {} steps, the implementation agrees with the model",
                file.display(),
                report.tally.steps
            );
            Ok(0)
        }
    }
}

//! JUnit XML for CI systems: one test case per trace, a failure element per divergence.

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use std::time::Duration;

/// One trace's result, as a JUnit test case.
#[derive(Clone, Debug)]
pub struct Case {
    /// The trace's name (`cover-000123`, `random-42`, `scenario-stale-completion`).
    pub name: String,
    /// The suite it belongs to (`cover`, `random`, `scenario`).
    pub suite: String,
    /// Seconds spent replaying it.
    pub seconds: f64,
    /// The divergence report, when the implementation disagreed with the model.
    pub failure: Option<String>,
}

/// Renders the cases as one `<testsuites>` document, one `<testsuite>` per suite.
pub fn render(cases: &[Case]) -> String {
    render_for("conform", cases)
}

/// [`render`] for the `leasewright` subcommand `command` (`conform`, `check`): the document's
/// name and each case's class name (`command.suite`) say which command ran it. A failure's
/// message is the report's first line, its type `violation` (`check`) or `divergence`, its text
/// the whole report. Written by quick-junit (nextest's JUnit writer).
pub fn render_for(command: &str, cases: &[Case]) -> String {
    let mut suites: Vec<&str> = cases.iter().map(|c| c.suite.as_str()).collect();
    suites.sort_unstable();
    suites.dedup();
    let mut report = Report::new(format!("leasewright {command}"));
    let mut total = Duration::ZERO;
    for suite in suites {
        let mut test_suite = TestSuite::new(suite);
        let mut time = Duration::ZERO;
        for case in cases.iter().filter(|c| c.suite == suite) {
            let status = match &case.failure {
                None => TestCaseStatus::success(),
                Some(report) => {
                    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    status
                        .set_message(report.lines().next().unwrap_or("divergence"))
                        .set_type(if command == "check" {
                            "violation"
                        } else {
                            "divergence"
                        })
                        .set_description(report.as_str());
                    status
                }
            };
            let seconds = Duration::try_from_secs_f64(case.seconds).unwrap_or_default();
            time += seconds;
            let mut test_case = TestCase::new(case.name.as_str(), status);
            test_case
                .set_classname(format!("{command}.{suite}"))
                .set_time(seconds);
            test_suite.add_test_case(test_case);
        }
        test_suite.set_time(time);
        total += time;
        report.add_test_suite(test_suite);
    }
    report.set_time(total);
    // Serializing into memory fails only on an I/O error, which a `Vec` never returns.
    report.to_string().unwrap_or_else(|error| {
        format!("<!-- the JUnit report could not be written: {error} -->\n")
    })
}

#[cfg(test)]
mod tests {
    use super::{render, Case};
    use quick_junit::{NonSuccessKind, Report, TestCaseStatus};

    #[test]
    fn a_divergence_becomes_a_failure_element_with_escaped_text() {
        let xml = render(&[
            Case {
                name: "cover-000001".into(),
                suite: "cover".into(),
                seconds: 0.5,
                failure: None,
            },
            Case {
                name: "random-7".into(),
                suite: "random".into(),
                seconds: 0.25,
                failure: Some("step 3: expected <rejected> & got accepted\nmore".into()),
            },
        ]);
        assert!(
            xml.contains("message=\"step 3: expected &lt;rejected&gt; &amp; got accepted\""),
            "{xml}"
        );
        let report = Report::deserialize_from_str(&xml).expect("the output parses as JUnit");
        assert_eq!(
            report.name.as_ref().map(|n| n.as_str()),
            Some("leasewright conform")
        );
        assert_eq!((report.tests, report.failures, report.errors), (2, 1, 0));
        let suites: Vec<(&str, usize, usize)> = report
            .test_suites
            .iter()
            .map(|s| (s.name.as_str(), s.tests, s.failures))
            .collect();
        assert_eq!(suites, [("cover", 1, 0), ("random", 1, 1)]);
        let cover = &report.test_suites[0].test_cases[0];
        assert_eq!(cover.name.as_str(), "cover-000001");
        assert_eq!(
            cover.classname.as_ref().map(|c| c.as_str()),
            Some("conform.cover")
        );
        assert_eq!(cover.time.map(|t| t.as_millis()), Some(500));
        assert!(matches!(cover.status, TestCaseStatus::Success { .. }));
        let random = &report.test_suites[1].test_cases[0];
        let TestCaseStatus::NonSuccess {
            kind,
            message,
            ty,
            description,
            ..
        } = &random.status
        else {
            panic!("random-7 is a failure: {xml}");
        };
        assert_eq!(*kind, NonSuccessKind::Failure);
        assert_eq!(
            message.as_ref().map(|m| m.as_str()),
            Some("step 3: expected <rejected> & got accepted")
        );
        assert_eq!(ty.as_ref().map(|t| t.as_str()), Some("divergence"));
        assert_eq!(
            description.as_ref().map(|d| d.as_str()),
            Some("step 3: expected <rejected> & got accepted\nmore")
        );
    }
}

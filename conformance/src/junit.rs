//! JUnit XML for CI systems: one test case per trace, a failure element per divergence.

use std::fmt::Write as _;

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
/// name and each case's class name (`command.suite`) say which command ran it.
pub fn render_for(command: &str, cases: &[Case]) -> String {
    let mut suites: Vec<&str> = cases.iter().map(|c| c.suite.as_str()).collect();
    suites.sort_unstable();
    suites.dedup();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(out, "<testsuites name=\"leasewright {}\">", escape(command));
    for suite in suites {
        let in_suite: Vec<&Case> = cases.iter().filter(|c| c.suite == suite).collect();
        let failures = in_suite.iter().filter(|c| c.failure.is_some()).count();
        let time: f64 = in_suite.iter().map(|c| c.seconds).sum();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" time=\"{time:.3}\">",
            escape(suite),
            in_suite.len()
        );
        for case in in_suite {
            let _ = write!(
                out,
                "    <testcase classname=\"{}.{}\" name=\"{}\" time=\"{:.3}\"",
                escape(command),
                escape(suite),
                escape(&case.name),
                case.seconds
            );
            match &case.failure {
                None => out.push_str("/>\n"),
                Some(report) => {
                    let first = report.lines().next().unwrap_or("divergence");
                    let _ = writeln!(
                        out,
                        ">\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>",
                        escape(first),
                        if command == "check" { "violation" } else { "divergence" },
                        escape(report)
                    );
                }
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' && c != '\r' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{render, Case};

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
        assert!(xml.contains("<testsuite name=\"cover\" tests=\"1\" failures=\"0\""));
        assert!(xml.contains("<testsuite name=\"random\" tests=\"1\" failures=\"1\""));
        assert!(xml.contains("message=\"step 3: expected &lt;rejected&gt; &amp; got accepted\""));
        assert!(xml.contains(
            "<testcase classname=\"conform.cover\" name=\"cover-000001\" time=\"0.500\"/>"
        ));
    }
}

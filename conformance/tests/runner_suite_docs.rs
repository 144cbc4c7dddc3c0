//! docs/runner-suite.md and README.md say how many scenarios the suite plays and list each one:
//! kept true against `SCENARIOS` (a scenario added or renamed fails here until the docs say so).

use leasewright_conformance::runner_suite::scenarios::SCENARIOS;

const GUIDE: &str = include_str!("../../docs/runner-suite.md");
const README: &str = include_str!("../../README.md");

#[test]
fn the_docs_count_and_list_every_scenario() {
    let count = format!("through {} scenarios at once", SCENARIOS.len());
    assert!(GUIDE.contains(&count), "docs/runner-suite.md: {count:?}");
    assert!(README.contains(&count), "README.md: {count:?}");
    let today = format!("({} scenarios)", SCENARIOS.len());
    assert!(
        GUIDE.contains(&today),
        "docs/runner-suite.md's table of today: {today:?}"
    );
    // The scenario table: the rows after its header, each naming one or more scenarios.
    let table = GUIDE
        .split("| scenario | what the control plane does | duties judged |")
        .nth(1)
        .expect("docs/runner-suite.md has the scenario table");
    let rows: Vec<&str> = table
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .collect();
    let listed: Vec<&str> = rows
        .iter()
        .filter_map(|row| row.split('|').nth(1))
        .flat_map(|cell| cell.split(','))
        .map(|name| name.trim().trim_matches('`'))
        .collect();
    for scenario in SCENARIOS {
        assert!(
            listed.contains(&scenario.name),
            "docs/runner-suite.md's scenario table lists {}",
            scenario.name
        );
    }
    assert_eq!(
        listed.len(),
        SCENARIOS.len(),
        "the scenario table lists exactly the suite's scenarios: {listed:?}"
    );
}

//! Figures that cannot drift (issue 38 item 2): the docs' flag lists, route lists and counts
//! checked against the code, so a change that makes one untrue fails here. rust-analyzer's tidy
//! tests are the model. What a command measures is not here: each doc gives the command beside
//! its figure, and `.ci/doc-commands` runs the command blocks.

use std::collections::BTreeSet;
use std::process::Command;

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `leasewright ARGS --help`.
fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .args(args)
        .arg("--help")
        .output()
        .expect("runs leasewright");
    assert!(out.status.success(), "{args:?} --help");
    String::from_utf8(out.stdout).unwrap()
}

/// Every `--flag` in `text` (letters, digits and dashes after two dashes).
fn flags(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("--") {
        let start = i + at;
        let before_ok = start == 0 || !(bytes[start - 1].is_ascii_alphanumeric());
        let mut end = start + 2;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'-') {
            end += 1;
        }
        let name = &text[start..end];
        if before_ok && name.len() > 3 && bytes[start + 2].is_ascii_lowercase() {
            found.insert(name.trim_end_matches('-').to_owned());
        }
        i = end.max(start + 2);
    }
    found
}

/// The options `--help` defines: the first `--name` of each line that starts with `-` (not a
/// flag named in another option's description, such as `migrate`'s named in `serve`'s help).
fn defined_flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter(|line| line.trim_start().starts_with('-'))
        .filter_map(|line| {
            flags(line.split("  ").find(|p| p.contains("--")).unwrap_or(""))
                .into_iter()
                .next()
        })
        .collect()
}

/// The help of `command` and of each of its subcommands (and theirs), one text.
fn help_tree(command: &[&str]) -> String {
    let text = help(command);
    let mut all = text.clone();
    if let Some(list) = text.split("Commands:\n").nth(1) {
        for line in list.lines() {
            if line.trim().is_empty() || !line.starts_with("  ") {
                break;
            }
            let name = line.split_whitespace().next().unwrap();
            if name == "help" {
                continue;
            }
            let mut sub: Vec<&str> = command.to_vec();
            sub.push(name);
            all.push_str(&help_tree(&sub));
        }
    }
    all
}

/// README.md's command table: every flag a row names for `leasewright X` is one `X --help` (or
/// a subcommand's) shows. (The table is a summary; `--help` is the full list.)
#[test]
fn the_readmes_command_table_names_only_flags_the_commands_take() {
    let readme = read("README.md");
    let mut rows = 0;
    let mut wrong = Vec::new();
    for row in readme.lines().filter(|l| l.starts_with("| `leasewright ")) {
        let command: Vec<&str> = row["| `leasewright ".len()..]
            .split('`')
            .next()
            .unwrap()
            .split_whitespace()
            .take_while(|w| !w.starts_with('-'))
            .collect();
        let documented = flags(row);
        let known = flags(&help_tree(&command));
        rows += 1;
        for flag in documented.difference(&known) {
            // A row may name another command's flag when it says so (`serve --retain-...`).
            let other = row.contains(&format!("` {flag}")) && !row.contains(&format!("`{flag}"));
            if !other && !flags(&help_tree(&["serve"])).contains(flag) {
                wrong.push(format!("leasewright {}: {flag}", command.join(" ")));
            }
        }
    }
    assert!(
        rows >= 10,
        "README.md's command table was not found ({rows} rows)"
    );
    assert!(
        wrong.is_empty(),
        "README.md names flags --help does not show: {wrong:#?}"
    );
}

/// The commands whose docs/http.md synopsis is checked, each with the flags `--help` shows that
/// the synopsis may leave out: none today (every `serve` and `runner` flag is documented). A
/// flag added to either command without its line in docs/http.md fails the test below.
const FLAGS_NOT_YET_IN_HTTP_MD: &[(&str, &[&str])] = &[("serve", &[]), ("runner", &[])];

/// docs/http.md's `leasewright serve [...]` and `leasewright runner [...]` synopses against
/// their `--help`, both ways.
#[test]
fn the_synopses_in_http_md_are_the_commands_help() {
    let http = read("docs/http.md");
    for (command, tolerated) in FLAGS_NOT_YET_IN_HTTP_MD {
        let synopsis = http
            .split(&format!("```text\nleasewright {command}"))
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .unwrap_or_else(|| panic!("docs/http.md's {command} synopsis"));
        let documented = flags(synopsis);
        let mut known = defined_flags(&help(&[command]));
        known.remove("--help");
        let invented: Vec<_> = documented.difference(&known).collect();
        assert!(
            invented.is_empty(),
            "docs/http.md lists flags {command} does not take: {invented:?}"
        );
        let missing: BTreeSet<String> = known.difference(&documented).cloned().collect();
        let tolerated: BTreeSet<String> = tolerated.iter().map(|f| f.to_string()).collect();
        assert_eq!(
            missing, tolerated,
            "{command} --help flags missing from docs/http.md's synopsis (left) against the list \
             this test tolerates (right): document the new ones, and remove from the list those \
             documented"
        );
    }
}

/// `METHOD /path` with every `{name}` made `{}` and any query left out.
fn route(method: &str, path: &str) -> String {
    let path = path.split(['?', '[']).next().unwrap();
    let mut out = String::new();
    let mut in_param = false;
    for c in path.chars() {
        match c {
            '{' => {
                in_param = true;
                out.push_str("{}");
            }
            '}' => in_param = false,
            _ if in_param => {}
            _ => out.push(c),
        }
    }
    format!("{} {}", method.to_uppercase(), out)
}

/// docs/http.md names exactly the routes of docs/openapi.json (which is generated from the
/// handlers' annotations and checked against the router by the server's own test).
#[test]
fn http_md_names_exactly_the_routes_of_the_openapi_document() {
    let openapi: serde_json::Value = serde_json::from_str(&read("docs/openapi.json")).unwrap();
    let mut generated = BTreeSet::new();
    for (path, item) in openapi["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                generated.insert(route(method, path));
            }
        }
    }
    assert!(generated.len() > 20, "{generated:?}");
    let http = read("docs/http.md");
    let mut documented = BTreeSet::new();
    for piece in http.split('`').skip(1).step_by(2) {
        let mut words = piece.split_whitespace();
        if let (Some(method), Some(path)) = (words.next(), words.next()) {
            if ["GET", "POST", "PUT", "DELETE", "PATCH"].contains(&method) && path.starts_with('/')
            {
                documented.insert(route(method, path));
            }
        }
    }
    // The runner routes' table names paths only, under "All `POST`".
    let runner_routes = http
        .split("## Runner routes")
        .nth(1)
        .and_then(|section| section.split("\n## ").next())
        .expect("docs/http.md's runner routes");
    assert!(runner_routes.contains("All `POST`"), "{runner_routes}");
    for row in runner_routes.lines().filter(|l| l.starts_with("| `/")) {
        documented.insert(route("POST", row.split('`').nth(1).unwrap()));
    }
    let undocumented: Vec<_> = generated.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&generated).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "routes of docs/openapi.json that docs/http.md does not name: {undocumented:#?}; routes \
         docs/http.md names that docs/openapi.json has not: {unknown:#?}"
    );
}

/// Every "N flawed designs/variants" in README.md and docs/ is `check --list-variants`'s count.
#[test]
fn documented_variant_counts_are_the_checkers() {
    let out = Command::new(env!("CARGO_BIN_EXE_leasewright"))
        .args(["check", "--list-variants"])
        .output()
        .expect("runs leasewright");
    let variants = String::from_utf8(out.stdout).unwrap().lines().count();
    assert!(variants > 10, "{variants}");
    let mut docs = vec!["README.md".to_owned()];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") {
            docs.push(format!("docs/{name}"));
        }
    }
    let mut wrong = Vec::new();
    for doc in docs {
        let text = read(&doc);
        let words: Vec<&str> = text.split_whitespace().collect();
        for pair in words.windows(3) {
            let [count, adjective, noun] = pair else {
                continue;
            };
            let is_variants = *adjective == "flawed"
                && (noun.starts_with("design") || noun.starts_with("variant"));
            if let (true, Ok(n)) = (is_variants, count.parse::<usize>()) {
                if n != variants {
                    wrong.push(format!("{doc}: {count} {adjective} {noun}"));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "`check --list-variants` lists {variants}: {wrong:#?}"
    );
}

/// docs/ci.md's count of the configurations `check --profile ci` checks is the number the code
/// names (cli/src/check.rs, `profile`, one `name: "..."` each; the only profile).
#[test]
fn the_ci_profiles_documented_configuration_count_is_the_codes() {
    let code = read("cli/src/check.rs");
    let body = code
        .split("pub fn profile(profile: Profile) -> Vec<Named> {")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .expect("cli/src/check.rs's profile function");
    let named = body.matches("name: \"").count();
    assert!(named > 5, "{named}");
    let ci = read("docs/ci.md");
    let row = ci
        .lines()
        .find(|l| l.starts_with("| configurations `check --profile ci` checks |"))
        .expect("docs/ci.md's configuration count row");
    let documented: usize = row.split('|').nth(2).unwrap().trim().parse().unwrap();
    assert_eq!(documented, named, "docs/ci.md against cli/src/check.rs");
}

//! Test only: reading `EXPLAIN (FORMAT JSON)` output, for the tests that pin a statement's plan
//! (the claim's, the security log's).

/// A fresh test database and a store on it with the system clock and the default settings: the
/// setup of every plan test.
pub(crate) async fn test_store() -> (crate::database::TestDatabase, super::Store) {
    let database = crate::database::TestDatabase::create()
        .await
        .expect("a test database");
    let store = database
        .store(
            std::sync::Arc::new(crate::SystemClock),
            crate::StoreConfig::default(),
        )
        .await
        .expect("a store");
    (database, store)
}

/// Every node of the JSON `plan` that reads `relation` (its writes left out), as
/// "node type (index condition)".
pub(crate) fn scans_of(plan: &serde_json::Value, relation: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![plan];
    while let Some(node) = stack.pop() {
        match node {
            serde_json::Value::Array(items) => stack.extend(items),
            serde_json::Value::Object(map) => {
                let kind = map.get("Node Type").and_then(|v| v.as_str());
                if map.get("Relation Name").and_then(|v| v.as_str()) == Some(relation)
                    && kind != Some("ModifyTable")
                {
                    let condition = map
                        .get("Index Cond")
                        .and_then(|v| v.as_str())
                        .unwrap_or("no Index Cond");
                    found.push(format!("{} ({condition})", kind.unwrap_or("?")));
                }
                stack.extend(map.values());
            }
            _ => {}
        }
    }
    found
}

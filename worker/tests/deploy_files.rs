//! Keeps `deploy/` honest against the worker, offline: every JSON file parses; the task
//! definition sets only environment variables the worker accepts (`lease_worker::ENV_VARS`) and
//! leaves unset only the ones named here with a reason; the IAM policy grants exactly the DynamoDB
//! actions the worker calls (`lease_worker::DYNAMODB_ACTIONS`) on the lease table and
//! (`MEMBERS_DYNAMODB_ACTIONS`) on the membership table, nothing else; the
//! CloudFormation template says the same as the JSON files; the Dockerfile runs the binary as
//! PID 1. `cfn-lint` and `hadolint` run in `deploy/check.sh`, not here (they need Python).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use clap::Parser;
use lease_worker::config::{
    resolve_owner_id, LogFormat, DEFAULT_BATCH_MAX_DELAY_MS, DEFAULT_BATCH_MAX_EVENTS,
    DEFAULT_DRAIN_SECONDS, DEFAULT_LEASE_SECONDS, DEFAULT_METRICS_ADDR, DEFAULT_RENEW_SECONDS,
    DEFAULT_SKEW_MARGIN_MS, ECS_METADATA_ENV,
};
use lease_worker::metrics::Metrics;
use lease_worker::{Cli, DYNAMODB_ACTIONS, ENV_VARS, MEMBERS_DYNAMODB_ACTIONS};
use serde_json::Value;

/// Variables the worker reads that the task definition deliberately does not set.
const LEFT_UNSET: &[(&str, &str)] = &[
    (
        "OWNER_ID",
        "unset, the worker uses the task ARN from the ECS task metadata endpoint",
    ),
    (
        "AWS_ENDPOINT_URL",
        "only for DynamoDB Local; on AWS the SDK resolves the regional endpoint",
    ),
    (
        "METRICS_ADDR_FILE",
        "for the harness, which binds port 0; ECS uses the fixed METRICS_ADDR",
    ),
    (
        "CHAOS_SKIP_DEADLINE_CHECK",
        "test-only zombie switch; must never reach a real deployment",
    ),
    (
        "DEAD_LETTER_DIR",
        "only with SINK_REJECT_POLICY=dead-letter, which needs a volume; the deployment halts",
    ),
    (
        "RUST_LOG",
        "optional log filter; the worker's default level suits CloudWatch",
    ),
    (
        "ECS_CONTAINER_METADATA_URI_V4",
        "ECS sets it in every container; the worker reads its task ARN there",
    ),
    (
        "NO_COLOR",
        "logs reach CloudWatch through a pipe, never a terminal, so they are never coloured",
    ),
    (
        "SSL_CERT_FILE",
        "only to trust a private CA; the image's system store covers public endpoints",
    ),
    (
        "SSL_CERT_DIR",
        "only to trust a private CA; the image's system store covers public endpoints",
    ),
];

/// The task definition's container that runs `lease-worker`.
const WORKER_CONTAINER: &str = "worker";

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn read(relative: &str) -> String {
    let path = deploy_dir().join(relative);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn read_json(relative: &str) -> Value {
    serde_json::from_str(&read(relative)).unwrap_or_else(|e| panic!("deploy/{relative}: {e}"))
}

fn json_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("listing {}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            json_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "json") {
            out.push(path);
        }
    }
}

fn worker_container(task_definition: &Value) -> &Value {
    container(task_definition, WORKER_CONTAINER)
}

fn container<'a>(task_definition: &'a Value, name: &str) -> &'a Value {
    task_definition["containerDefinitions"]
        .as_array()
        .expect("containerDefinitions is a list")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("task definition has a container named {name:?}"))
}

/// The worker container's environment, in file order, as (name, value).
fn task_env(task_definition: &Value) -> Vec<(String, String)> {
    worker_container(task_definition)["environment"]
        .as_array()
        .expect("worker container has an environment list")
        .iter()
        .map(|e| {
            let name = e["name"].as_str().expect("env entry has a name");
            let value = e["value"].as_str().expect("env entry has a string value");
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

fn env_value<'a>(env: &'a [(String, String)], name: &str) -> &'a str {
    env.iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("task definition sets {name}"))
}

fn as_strings(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .map(|v| v.as_str().expect("a string").to_owned())
            .collect(),
        other => panic!("expected a string or a list of strings, got {other}"),
    }
}

fn set<I: IntoIterator<Item = S>, S: Into<String>>(items: I) -> BTreeSet<String> {
    items.into_iter().map(Into::into).collect()
}

#[test]
fn every_json_file_under_deploy_parses() {
    let mut files = Vec::new();
    json_files(&deploy_dir(), &mut files);
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    for expected in [
        "ecs/task-definition.json",
        "ecs/service.json",
        "iam/task-role-policy.json",
    ] {
        assert!(
            files.iter().any(|p| p.ends_with(expected)),
            "deploy/{expected} is missing; found {names:?}"
        );
    }
    for path in &files {
        let text = fs::read_to_string(path).expect("readable");
        if let Err(e) = serde_json::from_str::<Value>(&text) {
            panic!("{} does not parse: {e}", path.display());
        }
    }
    // The agent's configuration is JSON inside a string; a typo there only shows on AWS.
    let task = read_json("ecs/task-definition.json");
    let agent = container(&task, "cloudwatch-agent");
    let cw_config = agent["environment"]
        .as_array()
        .expect("agent environment")
        .iter()
        .find(|e| e["name"] == "CW_CONFIG_CONTENT")
        .expect("agent has CW_CONFIG_CONTENT");
    let text = cw_config["value"].as_str().expect("string value");
    serde_json::from_str::<Value>(text)
        .unwrap_or_else(|e| panic!("CW_CONFIG_CONTENT is not JSON: {e}"));
}

#[test]
fn task_definition_sets_only_variables_the_worker_accepts() {
    let accepted = set(ENV_VARS.iter().copied());
    let env = task_env(&read_json("ecs/task-definition.json"));
    let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();

    let unknown: Vec<&&str> = names.iter().filter(|n| !accepted.contains(**n)).collect();
    assert!(
        unknown.is_empty(),
        "task definition sets {unknown:?}, which the worker does not read (it reads {ENV_VARS:?})"
    );
    assert_eq!(
        set(names.iter().copied()).len(),
        names.len(),
        "a variable is set twice: {names:?}"
    );

    // Every variable the worker reads is either set, with its default, or left unset on purpose.
    for (name, why) in LEFT_UNSET {
        assert!(
            accepted.contains(*name),
            "LEFT_UNSET names {name}, which the worker no longer reads; drop it"
        );
        assert!(
            !names.contains(name),
            "{name} must not be set in the task definition: {why}"
        );
    }
    let decided: BTreeSet<String> = set(names.iter().copied())
        .union(&set(LEFT_UNSET.iter().map(|(n, _)| *n)))
        .cloned()
        .collect();
    let undecided: Vec<&String> = accepted.difference(&decided).collect();
    assert!(
        undecided.is_empty(),
        "the worker reads {undecided:?} but deploy/ecs/task-definition.json neither sets it \
         nor lists it as deliberately unset (LEFT_UNSET in this test)"
    );
}

#[test]
fn task_definition_values_are_the_worker_defaults() {
    let env = task_env(&read_json("ecs/task-definition.json"));
    for (name, default) in [
        ("LEASE_TABLE", lease_table::DEFAULT_TABLE),
        ("LEASE_SECONDS", DEFAULT_LEASE_SECONDS),
        ("RENEW_SECONDS", DEFAULT_RENEW_SECONDS),
        // The worker's default scan interval is the renew interval.
        ("SCAN_SECONDS", DEFAULT_RENEW_SECONDS),
        ("DRAIN_SECONDS", DEFAULT_DRAIN_SECONDS),
        ("SKEW_MARGIN_MS", DEFAULT_SKEW_MARGIN_MS),
        ("ACQUIRE_MODE", "expiry-aware"),
        ("BATCH_MAX_EVENTS", DEFAULT_BATCH_MAX_EVENTS),
        ("BATCH_MAX_DELAY_MS", DEFAULT_BATCH_MAX_DELAY_MS),
        ("METRICS_ADDR", DEFAULT_METRICS_ADDR),
    ] {
        assert_eq!(
            env_value(&env, name),
            default,
            "{name} is deployed with the worker's default"
        );
    }
    // Deliberate departures: JSON logs for CloudWatch, and a stream cap the task is sized for.
    assert_eq!(env_value(&env, "LOG_FORMAT"), "json");
    let max: u32 = env_value(&env, "MAX_STREAMS")
        .parse()
        .expect("MAX_STREAMS is a number");
    assert!(max > 0);
}

#[test]
fn task_definition_environment_passes_the_workers_validation() {
    // Each variable as the flag clap derives from it (LEASE_TABLE -> --lease-table), so the
    // check does not depend on this process's environment.
    let task = read_json("ecs/task-definition.json");
    let mut argv = vec!["lease-worker".to_owned()];
    for (name, value) in task_env(&task) {
        argv.push(format!("--{}", name.to_lowercase().replace('_', "-")));
        argv.push(value);
    }
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let config = cli
        .run
        .validate()
        .unwrap_or_else(|e| panic!("the worker would refuse the task definition: {e}"));
    assert_eq!(config.log_format, LogFormat::Json);
    assert!(!config.chaos_skip_deadline_check);
    let stop_timeout = worker_container(&task)["stopTimeout"]
        .as_u64()
        .expect("stopTimeout");
    assert!(
        config.drain < std::time::Duration::from_secs(stop_timeout),
        "drain {:?} ends before ECS's SIGKILL at stopTimeout {stop_timeout}s",
        config.drain
    );
}

#[test]
fn task_definition_fits_fargate_and_the_drain() {
    let task = read_json("ecs/task-definition.json");
    assert_eq!(task["networkMode"], "awsvpc");
    assert_eq!(
        task["requiresCompatibilities"],
        serde_json::json!(["FARGATE"])
    );
    for role in ["taskRoleArn", "executionRoleArn"] {
        assert!(task[role].is_string(), "task definition has {role}");
    }

    let worker = worker_container(&task);
    let env = task_env(&task);
    let stop_timeout = worker["stopTimeout"].as_u64().expect("stopTimeout set");
    let drain: f64 = env_value(&env, "DRAIN_SECONDS").parse().expect("number");
    assert!(
        (drain as u64) < stop_timeout && stop_timeout <= 120,
        "stopTimeout {stop_timeout} must exceed DRAIN_SECONDS {drain} and Fargate allows <= 120"
    );
    let lease: f64 = env_value(&env, "LEASE_SECONDS").parse().expect("number");
    let renew: f64 = env_value(&env, "RENEW_SECONDS").parse().expect("number");
    assert!(
        renew < lease,
        "RENEW_SECONDS {renew} < LEASE_SECONDS {lease}"
    );
    assert_eq!(env_value(&env, "LOG_FORMAT"), "json");

    let health = as_strings(&worker["healthCheck"]["command"]);
    assert_eq!(health.first().map(String::as_str), Some("CMD"), "exec form");
    assert!(
        health.iter().any(|s| s.ends_with("lease-worker")) && health.last().unwrap() == "health",
        "health check runs `lease-worker health`: {health:?}"
    );
    assert_eq!(worker["logConfiguration"]["logDriver"], "awslogs");

    // The metrics port in METRICS_ADDR is the one the agent scrapes.
    let port = env_value(&env, "METRICS_ADDR")
        .rsplit(':')
        .next()
        .expect("host:port")
        .to_owned();
    assert_eq!(
        worker["portMappings"][0]["containerPort"].to_string(),
        port,
        "containerPort matches METRICS_ADDR"
    );
    let agent = container(&task, "cloudwatch-agent");
    let scrape = agent["environment"]
        .as_array()
        .expect("agent environment")
        .iter()
        .find(|e| e["name"] == "PROMETHEUS_CONFIG_CONTENT")
        .and_then(|e| e["value"].as_str())
        .expect("agent has PROMETHEUS_CONFIG_CONTENT");
    assert!(
        scrape.contains(&format!("localhost:{port}")),
        "agent scrapes localhost:{port}"
    );
    assert_eq!(
        agent["essential"], false,
        "losing metrics must not stop the worker"
    );
}

#[test]
fn service_rolls_out_100_200_with_circuit_breaker() {
    let service = read_json("ecs/service.json");
    let deployment = &service["deploymentConfiguration"];
    assert_eq!(deployment["minimumHealthyPercent"], 100);
    assert_eq!(deployment["maximumPercent"], 200);
    assert_eq!(deployment["deploymentCircuitBreaker"]["enable"], true);
    assert_eq!(deployment["deploymentCircuitBreaker"]["rollback"], true);
    assert_eq!(service["launchType"], "FARGATE");
}

#[test]
fn task_role_policy_grants_exactly_the_workers_dynamodb_calls_on_its_two_tables_only() {
    let policy = read_json("iam/task-role-policy.json");
    let statements = policy["Statement"].as_array().expect("Statement list");
    let env = task_env(&read_json("ecs/task-definition.json"));
    let lease_table = env_value(&env, "LEASE_TABLE").to_owned();
    let members_table = env_value(&env, "MEMBERS_TABLE").to_owned();

    // Actions granted per table.
    let mut granted: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for statement in statements {
        assert_eq!(statement["Effect"], "Allow");
        assert!(
            statement.get("NotAction").is_none() && statement.get("NotResource").is_none(),
            "no NotAction/NotResource: they grant everything else"
        );
        let actions = as_strings(&statement["Action"]);
        assert!(
            !actions.iter().any(|a| a.contains('*')),
            "wildcard action in {actions:?}"
        );
        for resource in as_strings(&statement["Resource"]) {
            assert!(
                !resource.contains('*'),
                "resource {resource:?} has a wildcard"
            );
            let table = resource
                .strip_prefix("arn:aws:dynamodb:")
                .and_then(|r| r.rsplit_once(":table/"))
                .map(|(_, t)| t.to_owned())
                .unwrap_or_else(|| panic!("resource {resource:?} is a DynamoDB table's ARN"));
            assert!(
                table == lease_table || table == members_table,
                "resource {resource:?} is the lease table {lease_table} or the membership table {members_table}"
            );
            granted.entry(table).or_default().extend(actions.clone());
        }
    }
    for (table, expected, what) in [
        (&lease_table, DYNAMODB_ACTIONS, "lease table"),
        (&members_table, MEMBERS_DYNAMODB_ACTIONS, "membership table"),
    ] {
        let actions = granted.get(table).cloned().unwrap_or_default();
        assert_eq!(
            set(actions.iter().cloned()).len(),
            actions.len(),
            "an action is listed twice on the {what}: {actions:?}"
        );
        assert_eq!(
            set(actions.iter().cloned()),
            set(expected.iter().copied()),
            "deploy/iam/task-role-policy.json must grant exactly the worker's DynamoDB calls on the {what}"
        );
    }
}

// ---- CloudFormation, read as text -------------------------------------------------------------
//
// The template uses only long-form intrinsics, so it is plain YAML; to avoid a YAML dependency the
// checks below read it by indentation, which is enough for the few blocks they look at.

/// Non-comment, non-blank lines of the template.
fn template_lines() -> Vec<String> {
    read("cloudformation.yaml")
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !t.is_empty() && !t.starts_with('#')
        })
        .map(str::to_owned)
        .collect()
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// Index of the first line at or after `from` whose trimmed text equals `text`.
fn find_line(lines: &[String], from: usize, text: &str) -> usize {
    (from..lines.len())
        .find(|&i| lines[i].trim() == text)
        .unwrap_or_else(|| panic!("cloudformation.yaml has a line {text:?} after line {from}"))
}

/// The trimmed lines nested under the line at `at` (deeper indentation, until the first that is not).
fn block(lines: &[String], at: usize) -> Vec<String> {
    let base = indent(&lines[at]);
    lines[at + 1..]
        .iter()
        .take_while(|l| indent(l) > base)
        .map(|l| l.trim().to_owned())
        .collect()
}

/// The `- item` entries of a block sequence (items at the block's first level only).
fn list_items(block: &[String], prefix: &str) -> Vec<String> {
    block
        .iter()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(|s| s.trim().trim_matches('\'').trim_matches('"').to_owned())
        .collect()
}

#[test]
fn cloudformation_grants_the_same_least_privilege_policy() {
    let lines = template_lines();
    let text = lines.join("\n");
    assert!(
        !text.contains("dynamodb:*"),
        "no dynamodb:* in the template"
    );
    for line in &lines {
        let t = line.trim();
        assert!(
            !(t.starts_with("Resource:") && t.contains('*')) && t != "- '*'" && t != "- \"*\"",
            "no wildcard resource in the template: {t:?}"
        );
    }

    let mut listed = 0;
    for (name, expected, arn) in [
        (
            "lease-table",
            DYNAMODB_ACTIONS,
            "Fn::GetAtt: [LeaseTable, Arn]",
        ),
        (
            "members-table",
            MEMBERS_DYNAMODB_ACTIONS,
            "Fn::GetAtt: [MembersTable, Arn]",
        ),
    ] {
        let policy = find_line(&lines, 0, &format!("- PolicyName: {name}"));
        let action = find_line(&lines, policy, "Action:");
        let actions = list_items(&block(&lines, action), "- ");
        assert_eq!(
            set(actions.iter().cloned()),
            set(expected.iter().copied()),
            "the template's {name} policy must grant exactly the worker's DynamoDB calls there"
        );
        assert_eq!(
            set(actions.iter().cloned()).len(),
            actions.len(),
            "an action is listed twice"
        );
        let resource = find_line(&lines, action, "Resource:");
        assert_eq!(
            block(&lines, resource),
            vec![arn.to_owned()],
            "the {name} policy's resource is that table's ARN only"
        );
        listed += actions.len();
    }
    // Every dynamodb action anywhere in the template belongs to those two statements.
    let everywhere = text.matches("dynamodb:").count();
    assert_eq!(
        everywhere, listed,
        "dynamodb actions outside the two table policies"
    );
}

#[test]
fn cloudformation_worker_matches_the_task_definition() {
    let lines = template_lines();
    let worker = find_line(&lines, 0, "- Name: worker");
    let environment = find_line(&lines, worker, "Environment:");
    let names = list_items(&block(&lines, environment), "- Name: ");
    let json_names: Vec<String> = task_env(&read_json("ecs/task-definition.json"))
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        set(names.iter().cloned()),
        set(json_names),
        "the template's worker environment and deploy/ecs/task-definition.json set the same names"
    );
    assert!(
        names.iter().all(|n| ENV_VARS.contains(&n.as_str())),
        "the template sets only variables the worker reads: {names:?}"
    );

    let after_worker = block(&lines, worker).join("\n");
    for expected in [
        "StopTimeout: 60",
        "Command: [CMD, /usr/local/bin/lease-worker, health]",
        "LogDriver: awslogs",
    ] {
        assert!(
            after_worker.contains(expected),
            "the template's worker container has {expected:?}"
        );
    }
}

#[test]
fn cloudformation_table_service_and_alarms_follow_the_design() {
    let lines = template_lines();
    let text = lines.join("\n");
    let table = block(&lines, find_line(&lines, 0, "LeaseTable:"));
    for expected in [
        "- AttributeName: stream_id",
        "AttributeType: S",
        "KeyType: HASH",
        "BillingMode: PAY_PER_REQUEST",
        "PointInTimeRecoveryEnabled: true",
    ] {
        assert!(
            table.iter().any(|l| l == expected),
            "lease table has {expected:?}"
        );
    }
    let ttl = block(&lines, find_line(&lines, 0, "TimeToLiveSpecification:"));
    assert!(
        !ttl.iter().any(|l| l.contains("lease_expires_at")),
        "TTL never decides takeover, so it must not be on lease_expires_at: {ttl:?}"
    );

    for expected in [
        "MinimumHealthyPercent: 100",
        "MaximumPercent: 200",
        "Enable: true",
        "Rollback: true",
    ] {
        assert!(text.contains(expected), "service has {expected:?}");
    }

    // Each alarm's metric is one the agent forwards, or the alarm never sees data.
    let alarmed: Vec<String> = list_items(
        &lines
            .iter()
            .map(|l| l.trim().to_owned())
            .collect::<Vec<_>>(),
        "MetricName: ",
    );
    for metric in [
        "lease_worker_leases_lost_total",
        "lease_worker_renew_failures_total",
        "lease_worker_unowned_streams",
        "lease_worker_checkpoint_lag_events",
    ] {
        assert!(alarmed.iter().any(|m| m == metric), "an alarm on {metric}");
    }
    let agent_config = agent_config();
    for metric in &alarmed {
        let selector = format!("^{metric}$");
        assert!(
            text.contains(&format!("\"{selector}\"")),
            "the template's agent forwards {metric}"
        );
        assert!(
            agent_config.contains(&selector),
            "deploy/ecs/task-definition.json's agent forwards {metric}"
        );
    }
}

#[test]
fn dockerfile_runs_the_binary_as_pid_1_as_non_root() {
    let dockerfile = read("Dockerfile");
    let instructions: Vec<&str> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    assert!(
        instructions
            .iter()
            .any(|l| l.starts_with("ENTRYPOINT [\"/usr/local/bin/lease-worker\"")),
        "ENTRYPOINT in exec form, so the worker is PID 1 and receives SIGTERM"
    );
    assert!(instructions.contains(&"STOPSIGNAL SIGTERM"));
    let user = instructions
        .iter()
        .rfind(|l| l.starts_with("USER "))
        .expect("a USER instruction");
    assert!(
        !matches!(
            user.trim_start_matches("USER ").split(':').next(),
            Some("0" | "root")
        ),
        "runtime user is not root: {user}"
    );
    assert!(dockerfile.contains("--locked"), "the build uses Cargo.lock");
    assert!(
        dockerfile.contains("CMD [\"/usr/local/bin/lease-worker\", \"health\"]"),
        "HEALTHCHECK uses `lease-worker health`"
    );
}

/// The CloudWatch agent's configuration (`CW_CONFIG_CONTENT`) in the task definition.
fn agent_config() -> String {
    let task = read_json("ecs/task-definition.json");
    container(&task, "cloudwatch-agent")["environment"]
        .as_array()
        .expect("agent environment")
        .iter()
        .find(|e| e["name"] == "CW_CONFIG_CONTENT")
        .and_then(|e| e["value"].as_str())
        .expect("CW_CONFIG_CONTENT")
        .to_owned()
}

/// The `metric_selectors` of the agent configuration in the task definition, without `^…$`.
fn forwarded_metrics() -> BTreeSet<String> {
    let config: Value = serde_json::from_str(&agent_config()).expect("CW_CONFIG_CONTENT is JSON");
    let declarations =
        &config["logs"]["metrics_collected"]["prometheus"]["emf_processor"]["metric_declaration"];
    declarations
        .as_array()
        .expect("metric_declaration list")
        .iter()
        .flat_map(|d| as_strings(&d["metric_selectors"]))
        .map(|s| s.trim_start_matches('^').trim_end_matches('$').to_owned())
        .collect()
}

#[test]
fn forwarded_metrics_are_ones_the_worker_exports() {
    // A fresh worker registers every series (labelled counters at zero), so its first render
    // names everything it can ever export.
    let exported = Metrics::new().render(0);
    let samples: BTreeSet<&str> = exported
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let forwarded = forwarded_metrics();
    assert!(!forwarded.is_empty());
    for metric in &forwarded {
        assert!(
            samples.contains(metric.as_str()),
            "the agent forwards {metric}, which the worker does not export; it exports {samples:?}"
        );
    }
    // The template's agent forwards the same series as the task definition's.
    let template = read("cloudformation.yaml");
    let in_template: BTreeSet<String> = template
        .split('"')
        .filter(|s| s.starts_with("^lease_worker_") && s.ends_with('$'))
        .map(|s| s.trim_start_matches('^').trim_end_matches('$').to_owned())
        .collect();
    assert_eq!(
        in_template, forwarded,
        "template and task definition forward the same metrics"
    );
}

#[tokio::test]
async fn owner_id_is_the_task_arn_from_the_ecs_metadata_endpoint() {
    use axum::{http::Uri, routing::get, Json, Router};

    const ARN: &str = "arn:aws:ecs:us-east-1:123456789012:task/realtime-streaming/0a1b2c3d4e5f";
    // A trimmed task metadata v4 answer: the worker must pick TaskARN and ignore the rest.
    let task = serde_json::json!({
        "Cluster": "arn:aws:ecs:us-east-1:123456789012:cluster/realtime-streaming",
        "TaskARN": ARN,
        "Family": "lease-worker",
        "Revision": "7",
        "DesiredStatus": "RUNNING",
        "KnownStatus": "RUNNING",
        "LaunchType": "FARGATE",
        "AvailabilityZone": "us-east-1a",
        "Containers": [{"Name": "worker", "DockerId": "abc"}]
    });
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let log = seen.clone();
    let app = Router::new()
        .route("/v4/abc/task", get(move || async move { Json(task) }))
        .layer(axum::middleware::from_fn(
            move |uri: Uri, req: axum::extract::Request, next: axum::middleware::Next| {
                log.lock().unwrap().push(uri.path().to_owned());
                next.run(req)
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    // ECS hands each container a base URL with a path; the task document is at `{base}/task`.
    // No other test in this binary reads the environment, so setting it here races with nothing.
    std::env::set_var(ECS_METADATA_ENV, format!("http://{addr}/v4/abc"));
    let from_metadata = resolve_owner_id(None).await;
    let explicit = resolve_owner_id(Some("worker-a")).await;
    std::env::set_var(ECS_METADATA_ENV, format!("http://{addr}/v4/gone"));
    let fallback = resolve_owner_id(None).await;
    std::env::remove_var(ECS_METADATA_ENV);
    server.abort();

    assert_eq!(from_metadata, ARN, "OWNER_ID defaults to the task ARN");
    assert_eq!(explicit, "worker-a", "an explicit OWNER_ID wins");
    assert!(
        fallback.contains(&format!("-{}-", std::process::id())),
        "without a usable endpoint the owner is host name, pid and a suffix, got {fallback:?}"
    );
    let again = resolve_owner_id(None).await;
    assert_ne!(
        fallback, again,
        "the random suffix keeps two processes with one host name and pid apart"
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.first().map(String::as_str),
        Some("/v4/abc/task"),
        "{seen:?}"
    );
    assert!(
        !seen
            .iter()
            .any(|p| p.starts_with("/v4/abc") && p != "/v4/abc/task"),
        "only {{base}}/task is asked: {seen:?}"
    );
}

//! Source submission (issue 30): what `git archive` and `tar czf` make is accepted, PAX headers
//! and GNU long names included; what a runner could not extract is refused `422 invalid_source`
//! with the rule it breaks and the offending path; the gzip trailer is verified; and an archive
//! that expands 1,000:1 is refused with the server's memory within its documented bound.

use leasewright_server::source::{
    build_snapshot, raw_archive, RawEntry, SourceFile, MAX_NAME_BYTES, MAX_PATH_BYTES,
};
use serde_json::{json, Value};
use std::io::Write as _;
use std::path::Path;
use std::process::Command;

mod common;

use common::*;

/// POST a submission of `archive` (any bytes) to the project of `f`: the status and the answer.
async fn submit(
    server: &leasewright_server::app::Server,
    f: &Fixture,
    archive: &[u8],
) -> (u16, Value) {
    post(
        server,
        Some(OPERATOR),
        &format!("/v1/projects/{}/jobs", f.project),
        &json!({
            "command": "sh run.sh",
            "source_revision": "rev",
            "source_archive_base64": b64(archive),
        }),
    )
    .await
}

fn run(dir: &Path, program: &str, args: &[&str]) -> Vec<u8> {
    let output = Command::new(program)
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// A name of 200 bytes: too long for a tar header's 100-byte name field and for its ustar
/// prefix split, so `git archive` writes it in a PAX `path` record and GNU tar in a
/// `././@LongLink` entry.
fn long_name() -> String {
    format!("{}.txt", "n".repeat(196))
}

/// The files of the test repository: (path, mode, content).
fn tree() -> Vec<(String, u32, &'static str)> {
    vec![
        ("run.sh".into(), 0o755, "echo hi\n"),
        ("src/lib/deep/module.rs".into(), 0o644, "pub fn f() {}\n"),
        (format!("docs/{}", long_name()), 0o644, "long\n"),
    ]
}

/// A git repository holding [`tree`] in one commit (and an ignored file in its work tree).
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, mode, content) in tree() {
        let file = dir.path().join(&path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, content).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let git = |args: &[&str]| run(dir.path(), "git", args);
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.com",
        "commit",
        "-q",
        "-m",
        "tree",
    ]);
    dir
}

/// The manifest digest the server must answer for [`tree`].
fn expected_digest() -> String {
    build_snapshot(
        tree()
            .into_iter()
            .map(|(path, mode, content)| SourceFile {
                path,
                mode,
                content: content.as_bytes().to_vec(),
            })
            .collect(),
    )
    .unwrap()
    .manifest_digest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_archive_tar_and_tar_gz_and_tar_czf_of_a_work_tree_are_accepted() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    let repo = repository();
    let git_tar = run(repo.path(), "git", &["archive", "--format=tar", "HEAD"]);
    let git_tgz = run(repo.path(), "git", &["archive", "--format=tar.gz", "HEAD"]);
    // A global PAX header carrying the commit id (a `comment`), and the long name in a PAX
    // `path` record: the two things observation 1 of issue 30 was about.
    assert_eq!(
        git_tar[156], b'g',
        "git archive starts with a global PAX header"
    );
    assert!(git_tar.windows(8).any(|w| w == b"comment="));
    assert!(git_tar.windows(5).any(|w| w == b"path="));
    let tar_czf = run(
        repo.path(),
        "tar",
        &["czf", "-", "--exclude=.git", "--format=gnu", "."],
    );
    let mut tar_bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(tar_czf.as_slice()),
        &mut tar_bytes,
    )
    .unwrap();
    assert!(tar_bytes.windows(13).any(|w| w == b"././@LongLink"));
    for (what, archive) in [
        ("git archive --format=tar", git_tar),
        ("git archive --format=tar.gz", git_tgz),
        ("tar czf", tar_czf),
    ] {
        let (status, body) = submit(&server, &f, &archive).await;
        assert_eq!(status, 201, "{what}: {body}");
        assert_eq!(body["file_count"], 3, "{what}: {body}");
        assert_eq!(body["source_digest"], expected_digest(), "{what}: {body}");
    }
}

/// One gzip-compressed tar of raw entries, with a leading GNU long name entry when a name does
/// not fit the header (written by hand: the tar crate's builder refuses most of these).
fn entries(list: &[(&[u8], tar::EntryType, &[u8])]) -> Vec<u8> {
    let mut raw: Vec<RawEntry<'_>> = Vec::new();
    let mut long_names = Vec::new();
    for (name, _, _) in list {
        let mut long = name.to_vec();
        long.push(0);
        long_names.push(long);
    }
    for ((name, entry_type, content), long) in list.iter().zip(&long_names) {
        if name.len() > 100 {
            raw.push((
                b"././@LongLink",
                tar::EntryType::GNULongName,
                long.as_slice(),
                None,
            ));
        }
        raw.push((&name[..name.len().min(100)], *entry_type, content, None));
    }
    raw_archive(&raw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archives_no_runner_could_extract_are_refused_with_the_rule_and_the_offending_path() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    let regular = tar::EntryType::Regular;
    let long_component = "c".repeat(MAX_NAME_BYTES + 1);
    let longest_component = "c".repeat(MAX_NAME_BYTES);
    // 17 names of 250 bytes and 16 slashes: 4266 bytes, over the path limit.
    let long_path = vec!["d".repeat(250); 17].join("/");
    assert!(long_path.len() > MAX_PATH_BYTES);
    let symlink = {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("real"), "x").unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("link")).unwrap();
        run(dir.path(), "tar", &["czf", "-", "real", "link"])
    };
    let hard_link = {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("real"), "x").unwrap();
        std::fs::hard_link(dir.path().join("real"), dir.path().join("twin")).unwrap();
        run(dir.path(), "tar", &["czf", "-", "real", "twin"])
    };
    let nul_in_pax = raw_archive(&[
        (b"pax", tar::EntryType::XHeader, b"12 path=a\0b\n", None),
        (b"innocent", regular, b"x", None),
    ]);
    let cases: Vec<(&str, Vec<u8>, &str, &str)> = vec![
        (
            "a file next to a file under it",
            entries(&[(b"a", regular, b"1"), (b"a/b", regular, b"2")]),
            "path_conflict",
            "a/b",
        ),
        (
            "a file under a file, the other way round",
            entries(&[(b"a/b", regular, b"1"), (b"a", regular, b"2")]),
            "path_conflict",
            "a",
        ),
        (
            "a directory entry and a file of the same path",
            entries(&[
                (b"a/", tar::EntryType::Directory, b""),
                (b"a", regular, b"2"),
            ]),
            "path_conflict",
            "a",
        ),
        (
            "the same file twice",
            entries(&[(b"x/y", regular, b"1"), (b"./x//y", regular, b"2")]),
            "duplicate_path",
            "x/y",
        ),
        (
            "a name longer than 255 bytes",
            entries(&[(long_component.as_bytes(), regular, b"1")]),
            "name_too_long",
            &long_component,
        ),
        (
            "a path longer than 4096 bytes",
            entries(&[(long_path.as_bytes(), regular, b"1")]),
            "path_too_long",
            "",
        ),
        ("a symbolic link", symlink, "forbidden_entry", "link"),
        ("a hard link", hard_link, "forbidden_entry", "twin"),
        (
            "a character device",
            entries(&[(b"dev", tar::EntryType::Char, b"")]),
            "forbidden_entry",
            "dev",
        ),
        (
            "a block device",
            entries(&[(b"blk", tar::EntryType::Block, b"")]),
            "forbidden_entry",
            "blk",
        ),
        (
            "a FIFO",
            entries(&[(b"fifo", tar::EntryType::Fifo, b"")]),
            "forbidden_entry",
            "fifo",
        ),
        (
            "an absolute path",
            entries(&[(b"/etc/x", regular, b"1")]),
            "unsafe_path",
            "/etc/x",
        ),
        (
            "a path climbing out",
            entries(&[(b"a/../../x", regular, b"1")]),
            "unsafe_path",
            "a/../../x",
        ),
        (
            "a name that is not UTF-8",
            entries(&[(b"a\xff", regular, b"1")]),
            "unsupported_name",
            "a\u{fffd}",
        ),
        (
            "a NUL in a PAX path",
            nul_in_pax,
            "unsupported_name",
            "a\u{0}b",
        ),
    ];
    for (what, archive, rule, path) in &cases {
        let (status, body) = submit(&server, &f, archive).await;
        assert_eq!(status, 422, "{what}: {body}");
        assert_eq!(body["error"]["code"], "invalid_source", "{what}: {body}");
        assert_eq!(body["error"]["rule"], *rule, "{what}: {body}");
        if path.is_empty() {
            assert!(
                body["error"]["path"].as_str().unwrap().starts_with("dddd"),
                "{what}: {body}"
            );
        } else {
            assert_eq!(body["error"]["path"], *path, "{what}: {body}");
        }
    }
    // The limits themselves are allowed: a name of 255 bytes in a path of 4096.
    let mut longest_path = vec![longest_component.as_str(); 16].join("/");
    longest_path.push('/');
    longest_path.push_str(&"e".repeat(MAX_PATH_BYTES - longest_path.len()));
    assert_eq!(longest_path.len(), MAX_PATH_BYTES);
    let (status, body) = submit(
        &server,
        &f,
        &entries(&[(longest_path.as_bytes(), regular, b"1")]),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    // Nothing refused was stored: one job, the last one.
    assert_eq!(f.operator.jobs(f.project).await.unwrap().len(), 1);
}

/// `archive` (one gzip member) with `edit` applied to its bytes.
fn edited(archive: &[u8], edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut bytes = archive.to_vec();
    edit(&mut bytes);
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_with_a_wrong_or_missing_trailer_or_bytes_after_it_is_refused() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    let good = entries(&[(b"run.sh", tar::EntryType::Regular, b"echo hi\n")]);
    let (status, body) = submit(&server, &f, &good).await;
    assert_eq!(status, 201, "{body}");
    let n = good.len();
    for (what, archive) in [
        ("a wrong CRC-32", edited(&good, |b| b[n - 8] ^= 0xff)),
        ("a wrong length", edited(&good, |b| b[n - 4] ^= 0x01)),
        ("no trailer", edited(&good, |b| b.truncate(n - 8))),
        ("half a trailer", edited(&good, |b| b.truncate(n - 3))),
        (
            "garbage after the member",
            edited(&good, |b| b.extend_from_slice(b"garbage")),
        ),
        (
            "a second gzip member",
            edited(&good, |b| b.extend_from_slice(&good)),
        ),
    ] {
        let (status, body) = submit(&server, &f, &archive).await;
        assert_eq!(status, 422, "{what}: {body}");
        assert_eq!(body["error"]["rule"], "corrupt_gzip", "{what}: {body}");
    }
}

/// `/proc/self/status`'s `VmHWM` (the peak resident set size of this process), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .expect("VmHWM in kB");
    kib * 1024
}

const MIB: u64 = 1024 * 1024;
/// What each bomb expands to.
const BOMB: u64 = 250 * MIB;

/// A gzip of `head`, then `BOMB` bytes of `fill`, then `tail`, made by the system's `gzip` (a
/// debug build's deflate takes many seconds for 250 MiB), fed a MiB at a time: never held
/// expanded.
fn bomb(head: &[u8], fill: u8, tail: &[u8]) -> Vec<u8> {
    let mut gzip = Command::new("gzip")
        .args(["-c", "-n"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("gzip");
    let mut stdin = gzip.stdin.take().unwrap();
    let (head, tail) = (head.to_vec(), tail.to_vec());
    let feeder = std::thread::spawn(move || {
        stdin.write_all(&head).unwrap();
        let chunk = vec![fill; MIB as usize];
        for _ in 0..BOMB / MIB {
            stdin.write_all(&chunk).unwrap();
        }
        stdin.write_all(&tail).unwrap();
    });
    let output = gzip.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert!(output.status.success());
    output.stdout
}

/// A tar header block for `name` of `entry_type` announcing `size` bytes.
fn header(name: &[u8], entry_type: tar::EntryType, size: u64) -> Vec<u8> {
    let mut header = tar::Header::new_gnu();
    header.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name);
    header.set_entry_type(entry_type);
    header.set_size(size);
    header.set_mode(0o644);
    header.set_cksum();
    header.as_bytes().to_vec()
}

/// The in-memory bound of a submission (docs/http.md): the expansion limit (64 MiB), on top of
/// what the process held before, with room for the body, its decoding and the allocator.
const SUBMISSION_BOUND: u64 = 64 * MIB + 32 * MIB;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archives_that_expand_a_thousandfold_are_refused_with_the_memory_bounded() {
    let (_db, server) = start(false).await;
    let f = fixture(&server).await;
    let zeros_file = bomb(
        &header(b"zeros", tar::EntryType::Regular, BOMB),
        0,
        &[0; 1024],
    );
    // A GNU long name of 250 MiB (the tar reader reads a long name into memory).
    let long_name = bomb(
        &header(b"././@LongLink", tar::EntryType::GNULongName, BOMB),
        b'a',
        &[header(b"x", tar::EntryType::Regular, 0), vec![0; 1024]].concat(),
    );
    // A one-file tar followed by 250 MiB of zeros (padding after the end of the archive).
    let trailing = bomb(
        &[
            header(b"run.sh", tar::EntryType::Regular, 3),
            b"x\n\n".to_vec(),
            vec![0; 509],
        ]
        .concat(),
        0,
        b"",
    );
    for archive in [&zeros_file, &long_name, &trailing] {
        assert!(archive.len() as u64 * 900 < BOMB, "{}", archive.len());
    }
    let before = peak_rss();
    for (what, archive, rule) in [
        ("a 250 MiB file of zeros", zeros_file, "too_large"),
        ("a 250 MiB GNU long name", long_name, "expands_too_large"),
        (
            "250 MiB of zeros after the archive",
            trailing,
            "expands_too_large",
        ),
    ] {
        let (status, body) = submit(&server, &f, &archive).await;
        assert_eq!(status, 422, "{what}: {body}");
        assert_eq!(body["error"]["code"], "invalid_source", "{what}: {body}");
        assert_eq!(body["error"]["rule"], rule, "{what}: {body}");
    }
    let after = peak_rss();
    eprintln!(
        "peak RSS before the bombs {} MiB, after {} MiB",
        before / MIB,
        after / MIB
    );
    assert!(
        after <= before + SUBMISSION_BOUND,
        "peak RSS went from {} MiB to {} MiB",
        before / MIB,
        after / MIB
    );
    assert!(f.operator.jobs(f.project).await.unwrap().is_empty());
}

//! Immutable source snapshots.
//!
//! A snapshot is a gzip-compressed tar of the regular files of a tree, sorted by path, with every
//! header normalized (mtime 0, uid/gid 0, no user or group names, mode `0644` or `0755`). Its
//! **blob digest** is the SHA-256 of the compressed bytes (the key of the content-addressed store);
//! its **manifest digest** is the SHA-256 over the sorted `(path, mode, file sha256)` lines (see
//! [`manifest_digest`]). The job's source identity is (git revision, manifest digest).
//!
//! Reading an archive (a submission, or a runner's extraction) is bounded and refuses anything a
//! runner could not extract: only regular files and directories, relative paths without `..`,
//! names of at most [`MAX_NAME_BYTES`] and paths of at most [`MAX_PATH_BYTES`] bytes, UTF-8
//! without NUL, no links of any kind, no device files, no duplicate paths, no path that is a file
//! and a directory at once (`a` and `a/b`), limits on file count, content size and the size of the
//! decompressed stream. PAX headers (global and per file) and GNU long names are metadata, not
//! files. A gzip member's trailer (CRC-32 and length) is verified and nothing may follow it.
//! Nothing is ever written outside the destination directory.

use flate2::bufread::GzDecoder;
use flate2::write::GzEncoder;
use flate2::{Compression, GzBuilder};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Component, Path, PathBuf};

/// The longest name (one path component) a source file may have, in bytes: Linux's `NAME_MAX`.
pub const MAX_NAME_BYTES: usize = 255;
/// The longest path (relative to the workspace) a source file may have, in bytes: Linux's
/// `PATH_MAX`.
pub const MAX_PATH_BYTES: usize = 4096;

/// The operating system's limit of a path given to a system call, its terminating NUL included
/// (Linux's `PATH_MAX`): a runner extracts a source file at `<workspace>/<path>`, which must be
/// shorter than this, so a path within [`MAX_PATH_BYTES`] is refused by a runner whose workspace
/// leaves no room for it ([`SourceError::WorkspacePathTooLong`]).
pub const PATH_MAX: usize = 4096;

/// Why a tree or an archive was refused.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("archive entry {0:?} has an absolute path or leaves the workspace")]
    EscapingPath(String),
    #[error("archive entry {0:?} has a name that is not UTF-8 or holds a NUL byte")]
    UnsupportedName(String),
    #[error("archive entry {0:?} has a name longer than {MAX_NAME_BYTES} bytes")]
    NameTooLong(String),
    #[error("archive entry {0:?} has a path longer than {MAX_PATH_BYTES} bytes")]
    PathTooLong(String),
    #[error(
        "archive entry {path:?} ({path_bytes} bytes) does not fit in this runner's workspace \
         {workspace:?} ({workspace_bytes} bytes): together {total} bytes, past the operating \
         system's limit of {max} bytes for a path (PATH_MAX {PATH_MAX} with its NUL); give the \
         runner a shorter --workdir",
        path_bytes = path.len(),
        workspace_bytes = workspace.len(),
        total = workspace.len() + 1 + path.len(),
        max = PATH_MAX - 1
    )]
    WorkspacePathTooLong { path: String, workspace: String },
    #[error("archive entry {0:?} is a link or a special file; only regular files and directories are allowed")]
    ForbiddenEntryType(String),
    #[error("archive entry {0:?} appears twice")]
    DuplicatePath(String),
    #[error(
        "archive entry {path:?} collides with {other:?}: a path cannot be a file and a directory"
    )]
    PathConflict { path: String, other: String },
    #[error("the archive has more than {0} files")]
    TooManyFiles(usize),
    #[error("the archive's content is larger than {0} bytes")]
    TooLarge(u64),
    #[error("the archive expands to more than {0} bytes")]
    ExpandsTooLarge(u64),
    #[error("the gzip stream is corrupt: {0}")]
    CorruptGzip(String),
    #[error("the archive's blob digest is {actual}, the leased source names {expected}")]
    BlobDigestMismatch { expected: String, actual: String },
    #[error("the extracted manifest digest is {actual}, the leased source identity is {expected}")]
    ManifestDigestMismatch { expected: String, actual: String },
    #[error("the source tree has a symbolic link or special file at {0:?}; snapshots hold regular files only")]
    UnsupportedFile(PathBuf),
    #[error("a path is not valid UTF-8: {0:?}")]
    NonUtf8Path(PathBuf),
    #[error("the archive is malformed: {0}")]
    Malformed(String),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

impl SourceError {
    /// The stable name of the extraction rule an archive broke (docs/http.md, `invalid_source`).
    pub fn rule(&self) -> &'static str {
        match self {
            SourceError::EscapingPath(_) => "unsafe_path",
            SourceError::UnsupportedName(_) | SourceError::NonUtf8Path(_) => "unsupported_name",
            SourceError::NameTooLong(_) => "name_too_long",
            SourceError::PathTooLong(_) => "path_too_long",
            SourceError::WorkspacePathTooLong { .. } => "workspace_path_too_long",
            SourceError::ForbiddenEntryType(_) | SourceError::UnsupportedFile(_) => {
                "forbidden_entry"
            }
            SourceError::DuplicatePath(_) => "duplicate_path",
            SourceError::PathConflict { .. } => "path_conflict",
            SourceError::TooManyFiles(_) => "too_many_files",
            SourceError::TooLarge(_) => "too_large",
            SourceError::ExpandsTooLarge(_) => "expands_too_large",
            SourceError::CorruptGzip(_) => "corrupt_gzip",
            SourceError::BlobDigestMismatch { .. } | SourceError::ManifestDigestMismatch { .. } => {
                "digest_mismatch"
            }
            SourceError::Malformed(_) | SourceError::Io(_) => "malformed",
        }
    }

    /// The offending path, when the refusal is about one entry.
    pub fn path(&self) -> Option<&str> {
        match self {
            SourceError::EscapingPath(path)
            | SourceError::UnsupportedName(path)
            | SourceError::NameTooLong(path)
            | SourceError::PathTooLong(path)
            | SourceError::ForbiddenEntryType(path)
            | SourceError::DuplicatePath(path)
            | SourceError::PathConflict { path, .. }
            | SourceError::WorkspacePathTooLong { path, .. } => Some(path),
            _ => None,
        }
    }
}

/// Limits of an extraction.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_files: usize,
    /// The most bytes the files' contents may add up to (as their headers announce them).
    pub max_total_bytes: u64,
    /// The most bytes the decompressed tar stream may have (headers, PAX records, long names,
    /// padding and contents): reading stops there.
    pub max_expanded_bytes: u64,
}

const MIB: u64 = 1024 * 1024;

impl Default for Limits {
    /// A runner's limits: 10 000 files, 256 MiB of content, 320 MiB expanded (room for the
    /// headers and long names of a snapshot of 10 000 files the server accepted).
    fn default() -> Self {
        Self {
            max_files: 10_000,
            max_total_bytes: 256 * MIB,
            max_expanded_bytes: 320 * MIB,
        }
    }
}

impl Limits {
    /// A submission's limits (the server holds a submission in memory while it re-snapshots
    /// it): 10 000 files, and 64 MiB decompressed, contents and metadata together.
    pub const fn submission() -> Self {
        Self {
            max_files: 10_000,
            max_total_bytes: 64 * MIB,
            max_expanded_bytes: 64 * MIB,
        }
    }
}

/// One file of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFile {
    /// Relative, `/`-separated, normalized.
    pub path: String,
    /// `0o644` or `0o755`.
    pub mode: u32,
    pub content: Vec<u8>,
}

/// A deterministic snapshot.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The gzip-compressed tar.
    pub archive: Vec<u8>,
    /// SHA-256 of `archive` (hex).
    pub blob_sha256: String,
    /// The manifest digest (hex): the source identity's digest.
    pub manifest_digest: String,
    pub file_count: usize,
}

/// SHA-256 (hex) of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn normalize_mode(mode: u32) -> u32 {
    if mode & 0o111 != 0 {
        0o755
    } else {
        0o644
    }
}

/// The manifest digest: SHA-256 over one line per file, sorted by path:
/// `<path> NUL <mode in octal> NUL <sha256 of the content, hex> LF`.
pub fn manifest_digest<'a>(entries: impl IntoIterator<Item = (&'a str, u32, &'a str)>) -> String {
    let mut lines: Vec<(&str, u32, &str)> = entries.into_iter().collect();
    lines.sort_by(|a, b| a.0.cmp(b.0));
    let mut hasher = Sha256::new();
    for (path, mode, sha) in lines {
        hasher.update(path.as_bytes());
        hasher.update([0]);
        hasher.update(format!("{:o}", normalize_mode(mode)).as_bytes());
        hasher.update([0]);
        hasher.update(sha.as_bytes());
        hasher.update(b"\n");
    }
    hex::encode(hasher.finalize())
}

/// The deterministic snapshot of `files` (sorted by path here).
pub fn build_snapshot(mut files: Vec<SourceFile>) -> Result<Snapshot, SourceError> {
    files.sort_by(|a, b| a.path.cmp(&b.path));
    for pair in files.windows(2) {
        if pair[0].path == pair[1].path {
            return Err(SourceError::DuplicatePath(pair[0].path.clone()));
        }
    }
    let encoder = GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), Compression::default());
    let mut builder = tar::Builder::new(encoder);
    builder.mode(tar::HeaderMode::Deterministic);
    let mut shas = Vec::with_capacity(files.len());
    for file in &files {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(file.content.len() as u64);
        header.set_mode(normalize_mode(file.mode));
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        builder.append_data(&mut header, &file.path, file.content.as_slice())?;
        shas.push(sha256_hex(&file.content));
    }
    let encoder: GzEncoder<Vec<u8>> = builder.into_inner()?;
    let archive = encoder.finish()?;
    let manifest = manifest_digest(
        files
            .iter()
            .zip(&shas)
            .map(|(f, sha)| (f.path.as_str(), f.mode, sha.as_str())),
    );
    Ok(Snapshot {
        blob_sha256: sha256_hex(&archive),
        manifest_digest: manifest,
        file_count: files.len(),
        archive,
    })
}

/// The snapshot of the directory `root`: every regular file under it, except the `.git`
/// directory (the git revision identifies that). Symbolic links and special files are refused.
pub fn snapshot_dir(root: &Path) -> Result<Snapshot, SourceError> {
    use std::os::unix::fs::PermissionsExt;
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path)?;
            if meta.is_dir() {
                if entry.file_name() == ".git" && dir == root {
                    continue;
                }
                stack.push(path);
            } else if meta.is_file() {
                let relative = path.strip_prefix(root).map_err(|_| {
                    SourceError::Malformed("a file outside the snapshot root".into())
                })?;
                let relative = relative
                    .to_str()
                    .ok_or_else(|| SourceError::NonUtf8Path(path.clone()))?
                    .to_owned();
                files.push(SourceFile {
                    path: relative,
                    mode: meta.permissions().mode(),
                    content: std::fs::read(&path)?,
                });
            } else {
                return Err(SourceError::UnsupportedFile(path));
            }
        }
    }
    build_snapshot(files)
}

/// What consumes a file's content while an archive is read: given the path, the normalized mode,
/// the size and the content, it answers the content's SHA-256.
type Sink<'a> = dyn FnMut(&str, u32, u64, &mut dyn Read) -> Result<String, SourceError> + 'a;

/// The files an archive holds: path → (mode, SHA-256 of the content).
type Manifest = BTreeMap<String, (u32, String)>;

/// `raw` as shown in an error: lossy UTF-8, cut after [`MAX_PATH_BYTES`] bytes.
fn shown(raw: &[u8]) -> String {
    let mut text = String::from_utf8_lossy(&raw[..raw.len().min(MAX_PATH_BYTES)]).into_owned();
    if raw.len() > MAX_PATH_BYTES {
        text.push('…');
    }
    text
}

/// The checked relative path of an archive entry, normalized (`./a//b/` is `a/b`); empty for the
/// root itself (`./`).
fn checked_path(raw: &[u8]) -> Result<String, SourceError> {
    if raw.contains(&0) {
        return Err(SourceError::UnsupportedName(shown(raw)));
    }
    let text = std::str::from_utf8(raw).map_err(|_| SourceError::UnsupportedName(shown(raw)))?;
    let mut parts = Vec::new();
    for component in Path::new(text).components() {
        match component {
            Component::Normal(part) => {
                let part = part
                    .to_str()
                    .ok_or_else(|| SourceError::UnsupportedName(shown(raw)))?;
                if part.len() > MAX_NAME_BYTES {
                    return Err(SourceError::NameTooLong(shown(raw)));
                }
                parts.push(part);
            }
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(SourceError::EscapingPath(shown(raw)))
            }
        }
    }
    let path = parts.join("/");
    if path.len() > MAX_PATH_BYTES {
        return Err(SourceError::PathTooLong(shown(raw)));
    }
    Ok(path)
}

/// The paths an archive has claimed so far: a path is a file or a directory, never both, and a
/// file is never claimed twice.
#[derive(Default)]
struct Claims {
    files: Manifest,
    /// Directories: those with an entry of their own and the parents of every claimed path.
    dirs: BTreeSet<String>,
}

impl Claims {
    /// Claim `path` as a file (`is_dir` false) or a directory.
    fn claim(&mut self, path: &str, is_dir: bool) -> Result<(), SourceError> {
        let conflict = |other: &str| SourceError::PathConflict {
            path: path.to_owned(),
            other: other.to_owned(),
        };
        if self.files.contains_key(path) {
            return Err(if is_dir {
                conflict(path)
            } else {
                SourceError::DuplicatePath(path.to_owned())
            });
        }
        if !is_dir && self.dirs.contains(path) {
            return Err(conflict(path));
        }
        let parents = path.match_indices('/').map(|(i, _)| &path[..i]);
        for parent in parents.clone() {
            if self.files.contains_key(parent) {
                return Err(conflict(parent));
            }
        }
        for parent in parents {
            if !self.dirs.contains(parent) {
                self.dirs.insert(parent.to_owned());
            }
        }
        if is_dir {
            self.dirs.insert(path.to_owned());
        }
        Ok(())
    }
}

/// The decompressed stream of an archive: gzip (one member) or a plain tar.
enum Decoded<R: BufRead> {
    Gzip(GzDecoder<R>),
    Plain(R),
}

impl<R: BufRead> Read for Decoded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Decoded::Gzip(decoder) => decoder.read(buf),
            Decoded::Plain(reader) => reader.read(buf),
        }
    }
}

/// A reader that stops with an error past `limit` bytes (it reads at most one byte more, to
/// tell a stream of exactly `limit` bytes from a longer one), and remembers why it failed.
struct Bounded<R> {
    inner: R,
    /// Bytes read so far (never more than `limit`).
    read: u64,
    limit: u64,
    exceeded: bool,
    /// The first error of `inner`.
    failed: Option<String>,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.exceeded {
            return Err(std::io::Error::other("the archive expands past its limit"));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let room = self.limit - self.read;
        let want = usize::try_from(room).map_or(buf.len(), |room| buf.len().min(room.max(1)));
        match self.inner.read(&mut buf[..want]) {
            Ok(n) if n > 0 && room == 0 => {
                self.exceeded = true;
                Err(std::io::Error::other("the archive expands past its limit"))
            }
            Ok(n) => {
                self.read += n as u64;
                Ok(n)
            }
            Err(error) => {
                if error.kind() != std::io::ErrorKind::Interrupted && self.failed.is_none() {
                    self.failed = Some(error.to_string());
                }
                Err(error)
            }
        }
    }
}

#[allow(clippy::needless_pass_by_value)] // used as `map_err(malformed)`
fn malformed(error: std::io::Error) -> SourceError {
    SourceError::Malformed(error.to_string())
}

/// PAX keywords that would change what an entry is (its name, its size, a sparse map): in a
/// global header they would apply to every later entry, which our reader does not do, so an
/// archive holding them there is refused rather than read differently from `tar`.
fn changes_entries(key: &[u8]) -> bool {
    matches!(key, b"path" | b"linkpath" | b"size") || key.starts_with(b"GNU.sparse")
}

/// The entries of the tar stream `stream`, checked; `sink` consumes each file's content and
/// answers its SHA-256 (it is given the path, the normalized mode and the size). Directories are implied by file paths.
fn read_tar<R: Read>(
    stream: R,
    limits: Limits,
    sink: &mut Sink<'_>,
) -> Result<Manifest, SourceError> {
    let mut archive = tar::Archive::new(stream);
    let mut claims = Claims::default();
    let mut total: u64 = 0;
    for entry in archive.entries().map_err(malformed)? {
        let mut entry = entry.map_err(malformed)?;
        let entry_type = entry.header().entry_type();
        if entry_type == tar::EntryType::XGlobalHeader {
            // Metadata for the whole archive (`git archive` puts the commit id in `comment`).
            let mut records = Vec::new();
            entry.read_to_end(&mut records).map_err(malformed)?;
            for record in tar::PaxExtensions::new(&records) {
                let record = record.map_err(malformed)?;
                if changes_entries(record.key_bytes()) {
                    return Err(SourceError::Malformed(format!(
                        "a global PAX header sets {:?} for every entry",
                        String::from_utf8_lossy(record.key_bytes())
                    )));
                }
            }
            continue;
        }
        let path = checked_path(&entry.path_bytes())?;
        if let Some(records) = entry.pax_extensions().map_err(malformed)? {
            for record in records {
                if record
                    .map_err(malformed)?
                    .key_bytes()
                    .starts_with(b"GNU.sparse")
                {
                    return Err(SourceError::ForbiddenEntryType(path));
                }
            }
        }
        match entry_type {
            tar::EntryType::Directory => {
                if !path.is_empty() {
                    claims.claim(&path, true)?;
                }
                continue;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {}
            _ => return Err(SourceError::ForbiddenEntryType(path)),
        }
        if path.is_empty() {
            return Err(SourceError::EscapingPath(shown(&entry.path_bytes())));
        }
        claims.claim(&path, false)?;
        if claims.files.len() >= limits.max_files {
            return Err(SourceError::TooManyFiles(limits.max_files));
        }
        // The size after PAX records (`entry.size()`), not the header's field.
        let size = entry.size();
        total = total.saturating_add(size);
        if total > limits.max_total_bytes {
            return Err(SourceError::TooLarge(limits.max_total_bytes));
        }
        let mode = normalize_mode(entry.header().mode().map_err(malformed)?);
        // Never read more than the header announced (and the limit allows).
        let mut bounded = entry.take(size);
        let sha = sink(&path, mode, size, &mut bounded)?;
        claims.files.insert(path, (mode, sha));
    }
    Ok(claims.files)
}

/// What is left of the decompressed stream after the tar's end: zeros only (the end-of-archive
/// blocks and the record padding `tar` and `git archive` write), read to its end so the gzip
/// trailer is verified; and nothing after the gzip member.
fn finish<R: BufRead>(stream: &mut Bounded<Decoded<R>>) -> Result<(), SourceError> {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = stream.read(&mut buffer).map_err(malformed)?;
        if n == 0 {
            break;
        }
        if buffer[..n].iter().any(|b| *b != 0) {
            return Err(SourceError::Malformed(
                "data after the end of the tar archive".into(),
            ));
        }
    }
    if let Decoded::Gzip(decoder) = &mut stream.inner {
        if !decoder.get_mut().fill_buf().map_err(malformed)?.is_empty() {
            return Err(SourceError::CorruptGzip(
                "bytes after the end of the gzip member".into(),
            ));
        }
    }
    Ok(())
}

/// What one bounded pass over an archive (gzip-compressed or not) found, and how many
/// decompressed bytes it read.
fn read_entries_counted<R: BufRead>(
    mut reader: R,
    limits: Limits,
    sink: &mut Sink<'_>,
) -> (Result<Manifest, SourceError>, u64) {
    let gzip = match reader.fill_buf() {
        Ok([]) => {
            return (
                Err(SourceError::Malformed("the archive is empty".into())),
                0,
            )
        }
        Ok(head) => head.starts_with(&[0x1f, 0x8b]),
        Err(error) => return (Err(error.into()), 0),
    };
    let mut stream = Bounded {
        inner: if gzip {
            Decoded::Gzip(GzDecoder::new(reader))
        } else {
            Decoded::Plain(reader)
        },
        read: 0,
        limit: limits.max_expanded_bytes,
        exceeded: false,
        failed: None,
    };
    let result = read_tar(&mut stream, limits, sink).and_then(|files| {
        finish(&mut stream)?;
        Ok(files)
    });
    // A failure of the layers under the tar reader is what the tar reader saw as its error.
    let result = result.map_err(|error| {
        if stream.exceeded {
            SourceError::ExpandsTooLarge(limits.max_expanded_bytes)
        } else if let (true, Some(cause)) = (gzip, &stream.failed) {
            SourceError::CorruptGzip(cause.clone())
        } else {
            error
        }
    });
    (result, stream.read)
}

/// What one bounded pass over an archive found. Directories are implied by file paths.
fn read_entries<R: BufRead>(
    reader: R,
    limits: Limits,
    mut sink: impl FnMut(&str, u32, u64, &mut dyn Read) -> Result<String, SourceError>,
) -> Result<Manifest, SourceError> {
    read_entries_counted(reader, limits, &mut sink).0
}

/// Read an archive fully into memory under `limits` (used when a job is submitted): the files,
/// ready for [`build_snapshot`].
pub fn read_archive(bytes: &[u8], limits: Limits) -> Result<Vec<SourceFile>, SourceError> {
    let mut files = Vec::new();
    read_entries(bytes, limits, |path, mode, size, reader| {
        // `size` is within the limits: no reallocation past it.
        let mut content = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        reader.read_to_end(&mut content)?;
        let sha = sha256_hex(&content);
        files.push(SourceFile {
            path: path.to_owned(),
            mode,
            content,
        });
        Ok(sha)
    })?;
    Ok(files)
}

/// SHA-256 (hex) of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String, SourceError> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Verify the archive at `archive` against the leased identity, then extract it into `dest`
/// (which must be empty): blob digest first, then a bounded extraction, then the manifest digest.
/// On any error the caller must not execute anything from `dest`.
pub fn verify_and_extract(
    archive: &Path,
    expected_blob_sha256: &str,
    expected_manifest_digest: &str,
    dest: &Path,
    limits: Limits,
) -> Result<(), SourceError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let actual = sha256_file(archive)?;
    if actual != expected_blob_sha256 {
        return Err(SourceError::BlobDigestMismatch {
            expected: expected_blob_sha256.to_owned(),
            actual,
        });
    }
    std::fs::create_dir_all(dest)?;
    let file = BufReader::new(std::fs::File::open(archive)?);
    let workspace = dest.to_string_lossy().into_owned();
    let seen = read_entries(file, limits, |path, mode, _, reader| {
        let target = dest.join(path);
        // Refused with its cause before any system call fails on it (ENAMETOOLONG).
        if target.as_os_str().len() >= PATH_MAX {
            return Err(SourceError::WorkspacePathTooLong {
                path: path.to_owned(),
                workspace: workspace.clone(),
            });
        }
        if let Some(parent) = target.parent() {
            // Every component was checked to be a normal name; no links are ever created, so
            // the parents are real directories under `dest`.
            std::fs::create_dir_all(parent)?;
        }
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&target)?;
        let mut hasher = Sha256::new();
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let n = reader.read(&mut buffer)?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
            out.write_all(&buffer[..n])?;
        }
        out.flush()?;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))?;
        Ok(hex::encode(hasher.finalize()))
    })?;
    let actual = manifest_digest(
        seen.iter()
            .map(|(path, (mode, sha))| (path.as_str(), *mode, sha.as_str())),
    );
    if actual != expected_manifest_digest {
        return Err(SourceError::ManifestDigestMismatch {
            expected: expected_manifest_digest.to_owned(),
            actual,
        });
    }
    Ok(())
}

/// A gzip-compressed tar with one raw entry (name bytes and type written as given, bypassing the
/// tar crate's own path checks): for tests of hostile archives.
pub fn hostile_archive(name: &[u8], entry_type: tar::EntryType, content: &[u8]) -> Vec<u8> {
    let mut header = tar::Header::new_old();
    {
        let old = header.as_old_mut();
        let n = name.len().min(old.name.len());
        old.name[..n].copy_from_slice(&name[..n]);
        if entry_type.is_symlink() || entry_type.is_hard_link() {
            let link = b"../../../etc/passwd";
            old.linkname[..link.len()].copy_from_slice(link);
        }
    }
    header.set_entry_type(entry_type);
    header.set_size(content.len() as u64);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_cksum();
    let mut tar_bytes = Vec::new();
    tar_bytes.extend_from_slice(header.as_bytes());
    tar_bytes.extend_from_slice(content);
    let pad = (512 - content.len() % 512) % 512;
    tar_bytes.extend(std::iter::repeat_n(0u8, pad + 1024));
    let mut encoder = GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), Compression::default());
    let _ = encoder.write_all(&tar_bytes);
    encoder.finish().unwrap_or_default()
}

/// One raw entry of [`raw_archive`]: name bytes, type, content, and the size its header
/// announces (`None`: the content's).
pub type RawEntry<'a> = (&'a [u8], tar::EntryType, &'a [u8], Option<u64>);

/// A gzip-compressed tar of raw entries, written without the tar crate's path checks, followed by
/// the end-of-archive blocks: for tests of hostile archives (traversals in PAX headers or GNU long
/// names, size and file-count bombs).
pub fn raw_archive(entries: &[RawEntry<'_>]) -> Vec<u8> {
    let mut tar_bytes = Vec::new();
    for (name, entry_type, content, size) in entries {
        let mut header = tar::Header::new_gnu();
        if let Some(gnu) = header.as_gnu_mut() {
            let n = name.len().min(gnu.name.len());
            gnu.name[..n].copy_from_slice(&name[..n]);
        }
        header.set_entry_type(*entry_type);
        header.set_size(size.unwrap_or(content.len() as u64));
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_cksum();
        tar_bytes.extend_from_slice(header.as_bytes());
        tar_bytes.extend_from_slice(content);
        tar_bytes.extend(std::iter::repeat_n(0u8, (512 - content.len() % 512) % 512));
    }
    tar_bytes.extend(std::iter::repeat_n(0u8, 1024));
    let mut encoder = GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), Compression::fast());
    let _ = encoder.write_all(&tar_bytes);
    encoder.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<SourceFile> {
        vec![
            SourceFile {
                path: "src/main.sh".into(),
                mode: 0o775,
                content: b"echo hi\n".to_vec(),
            },
            SourceFile {
                path: "README".into(),
                mode: 0o600,
                content: b"readme\n".to_vec(),
            },
        ]
    }

    #[test]
    fn a_snapshot_is_the_same_bytes_whatever_the_order_and_metadata_of_its_files() {
        let a = build_snapshot(files()).unwrap();
        let mut reversed = files();
        reversed.reverse();
        reversed[0].mode = 0o640;
        let b = build_snapshot(reversed).unwrap();
        assert_eq!(a.archive, b.archive);
        assert_eq!(a.blob_sha256, b.blob_sha256);
        assert_eq!(a.manifest_digest, b.manifest_digest);
        assert_eq!(a.file_count, 2);
    }

    #[test]
    fn a_verified_archive_extracts_to_the_same_manifest() {
        let snapshot = build_snapshot(files()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("a.tar.gz");
        std::fs::write(&archive, &snapshot.archive).unwrap();
        let dest = dir.path().join("ws");
        verify_and_extract(
            &archive,
            &snapshot.blob_sha256,
            &snapshot.manifest_digest,
            &dest,
            Limits::default(),
        )
        .unwrap();
        assert_eq!(
            std::fs::read(dest.join("src/main.sh")).unwrap(),
            b"echo hi\n"
        );
        let again = snapshot_dir(&dest).unwrap();
        assert_eq!(again.manifest_digest, snapshot.manifest_digest);
        assert_eq!(again.blob_sha256, snapshot.blob_sha256);
    }

    /// A path within the submission limit (3,820 bytes) extracts into a short workspace; a runner
    /// whose workspace is so long that `<workspace>/<path>` passes PATH_MAX refuses it with its
    /// cause (the path, both lengths, the limit, what to do), not an `ENAMETOOLONG` from deep
    /// inside the extraction.
    #[test]
    fn a_path_that_does_not_fit_in_the_runners_workspace_is_refused_with_its_cause() {
        let component = "a".repeat(200);
        let path = format!("{}/f", vec![component.as_str(); 19].join("/"));
        assert_eq!(path.len(), 3820);
        let snapshot = build_snapshot(vec![SourceFile {
            path: path.clone(),
            mode: 0o644,
            content: b"deep\n".to_vec(),
        }])
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("a.tar.gz");
        std::fs::write(&archive, &snapshot.archive).unwrap();
        let short = dir.path().join("ws");
        assert!(short.as_os_str().len() + 1 + path.len() < PATH_MAX);
        verify_and_extract(
            &archive,
            &snapshot.blob_sha256,
            &snapshot.manifest_digest,
            &short,
            Limits::default(),
        )
        .unwrap();
        assert_eq!(std::fs::read(short.join(&path)).unwrap(), b"deep\n");

        let long = dir
            .path()
            .join("b".repeat(200))
            .join("c".repeat(200))
            .join("src");
        assert!(long.as_os_str().len() + 1 + path.len() >= PATH_MAX);
        let error = verify_and_extract(
            &archive,
            &snapshot.blob_sha256,
            &snapshot.manifest_digest,
            &long,
            Limits::default(),
        )
        .unwrap_err();
        assert!(
            matches!(&error, SourceError::WorkspacePathTooLong { path: p, .. } if *p == path),
            "{error:?}"
        );
        assert_eq!(error.rule(), "workspace_path_too_long");
        assert_eq!(error.path(), Some(path.as_str()));
        let message = error.to_string();
        assert!(message.contains("(3820 bytes)"), "{message}");
        assert!(message.contains("4095"), "{message}");
        assert!(message.contains("shorter --workdir"), "{message}");
        // Nothing was written under the long workspace.
        assert!(!long.join(&component).exists());
    }

    #[test]
    fn a_tampered_blob_is_refused_before_extraction() {
        let snapshot = build_snapshot(files()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("a.tar.gz");
        let mut bytes = snapshot.archive.clone();
        let last = bytes.len() - 9;
        bytes[last] ^= 0xff;
        std::fs::write(&archive, &bytes).unwrap();
        let dest = dir.path().join("ws");
        let error = verify_and_extract(
            &archive,
            &snapshot.blob_sha256,
            &snapshot.manifest_digest,
            &dest,
            Limits::default(),
        )
        .unwrap_err();
        assert!(matches!(error, SourceError::BlobDigestMismatch { .. }));
        assert!(!dest.exists());
    }

    #[test]
    fn a_different_tree_under_a_matching_blob_fails_the_manifest_check() {
        let snapshot = build_snapshot(files()).unwrap();
        let other = build_snapshot(vec![SourceFile {
            path: "x".into(),
            mode: 0o644,
            content: b"x".to_vec(),
        }])
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("a.tar.gz");
        std::fs::write(&archive, &other.archive).unwrap();
        let error = verify_and_extract(
            &archive,
            &other.blob_sha256,
            &snapshot.manifest_digest,
            &dir.path().join("ws"),
            Limits::default(),
        )
        .unwrap_err();
        assert!(matches!(error, SourceError::ManifestDigestMismatch { .. }));
    }

    fn extract_hostile(name: &[u8], entry_type: tar::EntryType) -> SourceError {
        let bytes = hostile_archive(name, entry_type, b"owned\n");
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("a.tar.gz");
        std::fs::write(&archive, &bytes).unwrap();
        let dest = dir.path().join("ws").join("src");
        let error = verify_and_extract(
            &archive,
            &sha256_hex(&bytes),
            "irrelevant",
            &dest,
            Limits::default(),
        )
        .unwrap_err();
        assert!(!dir.path().join("ws").join("escape.txt").exists());
        assert!(!dir.path().join("escape.txt").exists());
        error
    }

    #[test]
    fn entries_that_escape_the_workspace_are_refused() {
        for name in [
            &b"../escape.txt"[..],
            b"/tmp/escape.txt",
            b"a/../../escape.txt",
        ] {
            let error = extract_hostile(name, tar::EntryType::Regular);
            assert!(
                matches!(error, SourceError::EscapingPath(_)),
                "{name:?}: {error}"
            );
        }
    }

    #[test]
    fn links_and_device_files_are_refused() {
        for entry_type in [
            tar::EntryType::Symlink,
            tar::EntryType::Link,
            tar::EntryType::Char,
            tar::EntryType::Block,
            tar::EntryType::Fifo,
        ] {
            let error = extract_hostile(b"innocent", entry_type);
            assert!(
                matches!(error, SourceError::ForbiddenEntryType(_)),
                "{entry_type:?}: {error}"
            );
        }
    }

    #[test]
    fn the_file_count_and_size_limits_hold() {
        let snapshot = build_snapshot(files()).unwrap();
        let limits = Limits {
            max_files: 1,
            max_total_bytes: 1 << 20,
            ..Limits::default()
        };
        assert!(matches!(
            read_archive(&snapshot.archive, limits),
            Err(SourceError::TooManyFiles(1))
        ));
        let limits = Limits {
            max_files: 10,
            max_total_bytes: 4,
            ..Limits::default()
        };
        assert!(matches!(
            read_archive(&snapshot.archive, limits),
            Err(SourceError::TooLarge(4))
        ));
        assert_eq!(
            read_archive(&snapshot.archive, Limits::default())
                .unwrap()
                .len(),
            2
        );
    }

    /// Extract `archive` (its blob digest matching) into an empty directory: the error, and
    /// whether anything was written outside the workspace.
    fn extract(archive: &[u8], limits: Limits) -> SourceError {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.tar.gz");
        std::fs::write(&path, archive).unwrap();
        let dest = dir.path().join("ws").join("src");
        let error = verify_and_extract(&path, &sha256_hex(archive), "irrelevant", &dest, limits)
            .unwrap_err();
        let mut outside: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        outside.sort();
        assert_eq!(outside, ["a.tar.gz", "ws"], "written outside the workspace");
        let ws: Vec<_> = std::fs::read_dir(dir.path().join("ws"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(ws.is_empty() || ws == ["src"], "{ws:?}");
        error
    }

    #[test]
    fn a_traversal_hidden_in_a_pax_header_or_a_gnu_long_name_is_refused() {
        let record = b"19 path=../evil.sh\n";
        let pax = raw_archive(&[
            (b"pax", tar::EntryType::XHeader, record, None),
            (b"innocent", tar::EntryType::Regular, b"owned", None),
        ]);
        let long_name = raw_archive(&[
            (
                b"././@LongLink",
                tar::EntryType::GNULongName,
                b"a/../../evil.sh\0",
                None,
            ),
            (b"innocent", tar::EntryType::Regular, b"owned", None),
        ]);
        let absolute_pax = raw_archive(&[
            (
                b"pax",
                tar::EntryType::XHeader,
                b"21 path=/tmp/evil.sh\n",
                None,
            ),
            (b"innocent", tar::EntryType::Regular, b"owned", None),
        ]);
        for (what, archive) in [
            ("pax", pax),
            ("gnu long name", long_name),
            ("absolute pax", absolute_pax),
        ] {
            let error = extract(&archive, Limits::default());
            assert!(
                matches!(error, SourceError::EscapingPath(_)),
                "{what}: {error}"
            );
            assert!(matches!(
                read_archive(&archive, Limits::default()),
                Err(SourceError::EscapingPath(_))
            ));
        }
    }

    #[test]
    fn links_are_refused_even_when_they_point_inside_and_directories_may_not_escape() {
        for (name, entry_type, link) in [
            (&b"inside"[..], tar::EntryType::Symlink, &b"other"[..]),
            (b"inside", tar::EntryType::Link, b"other"),
            (b"abs", tar::EntryType::Symlink, b"/etc/passwd"),
            (b"sparse", tar::EntryType::GNUSparse, b""),
        ] {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(entry_type);
            header.set_size(0);
            header.set_mode(0o777);
            {
                let gnu = header.as_gnu_mut().unwrap();
                gnu.name[..name.len()].copy_from_slice(name);
                gnu.linkname[..link.len()].copy_from_slice(link);
            }
            header.set_cksum();
            let mut tar_bytes = header.as_bytes().to_vec();
            tar_bytes.extend(std::iter::repeat_n(0u8, 1024));
            let mut encoder = GzBuilder::new().write(Vec::new(), Compression::fast());
            encoder.write_all(&tar_bytes).unwrap();
            let archive = encoder.finish().unwrap();
            let error = extract(&archive, Limits::default());
            // A sparse header the tar reader cannot even parse is malformed: refused too.
            assert!(
                matches!(error, SourceError::ForbiddenEntryType(_))
                    || (entry_type == tar::EntryType::GNUSparse
                        && matches!(error, SourceError::Malformed(_))),
                "{entry_type:?}: {error}"
            );
        }
        // A global PAX header is metadata (issue 30: `git archive` starts with one), but one
        // that would rename every entry is refused.
        let error = extract(
            &raw_archive(&[
                (
                    b"global",
                    tar::EntryType::XGlobalHeader,
                    b"17 path=/etc/evil\n",
                    None,
                ),
                (b"innocent", tar::EntryType::Regular, b"x", None),
            ]),
            Limits::default(),
        );
        assert!(matches!(error, SourceError::Malformed(_)), "{error}");
        let error = extract(
            &raw_archive(&[(b"../d/", tar::EntryType::Directory, b"", None)]),
            Limits::default(),
        );
        assert!(matches!(error, SourceError::EscapingPath(_)), "{error}");
        let error = extract(
            &raw_archive(&[(b"a\xff", tar::EntryType::Regular, b"x", None)]),
            Limits::default(),
        );
        assert!(matches!(error, SourceError::UnsupportedName(_)), "{error}");
    }

    #[test]
    fn the_same_path_twice_is_refused_however_it_is_spelled() {
        for second in [&b"a"[..], b"./a", b"a/."] {
            let error = extract(
                &raw_archive(&[
                    (b"a", tar::EntryType::Regular, b"1", None),
                    (second, tar::EntryType::Regular, b"2", None),
                ]),
                Limits::default(),
            );
            assert!(
                matches!(error, SourceError::DuplicatePath(_)),
                "{:?}: {error}",
                String::from_utf8_lossy(second)
            );
        }
    }

    #[test]
    fn size_and_file_count_bombs_are_refused_at_the_default_limits_before_they_are_read() {
        // A header announcing 256 MiB + 1 byte: refused before a byte of it is read (the archive
        // is a few hundred bytes).
        let limit = Limits::default().max_total_bytes;
        let size_bomb = raw_archive(&[(b"zeros", tar::EntryType::Regular, b"", Some(limit + 1))]);
        assert!(size_bomb.len() < 1024);
        assert!(matches!(
            extract(&size_bomb, Limits::default()),
            SourceError::TooLarge(_)
        ));
        // Many files that add up past the limit, each under it.
        let half = limit / 2 + 1;
        let split_bomb = raw_archive(&[
            (b"one", tar::EntryType::Regular, b"", Some(half)),
            (b"two", tar::EntryType::Regular, b"", Some(half)),
        ]);
        assert!(matches!(
            read_archive(&split_bomb, Limits::default()),
            Err(SourceError::TooLarge(_)) | Err(SourceError::Malformed(_))
        ));
        // An overflowing announced size.
        let overflow = raw_archive(&[(b"big", tar::EntryType::Regular, b"", Some(u64::MAX / 2))]);
        assert!(read_archive(&overflow, Limits::default()).is_err());
        // 10 001 empty files: one more than the limit (a few KiB compressed).
        let names: Vec<String> = (0..=Limits::default().max_files)
            .map(|i| format!("f{i}"))
            .collect();
        let entries: Vec<RawEntry<'_>> = names
            .iter()
            .map(|n| (n.as_bytes(), tar::EntryType::Regular, &b""[..], None))
            .collect();
        let count_bomb = raw_archive(&entries);
        assert!(matches!(
            extract(&count_bomb, Limits::default()),
            SourceError::TooManyFiles(10_000)
        ));
    }

    #[test]
    fn an_entry_shorter_than_its_header_announces_is_refused() {
        // (The tar reader fails when it skips to the next header past the end.)
        let snapshot = build_snapshot(files()).unwrap();
        // Cut the tar inside the last file's content.
        let mut tar_bytes = Vec::new();
        GzDecoder::new(snapshot.archive.as_slice())
            .read_to_end(&mut tar_bytes)
            .unwrap();
        let truncated = &tar_bytes[..512 + 3];
        let mut encoder = GzBuilder::new().write(Vec::new(), Compression::fast());
        encoder.write_all(truncated).unwrap();
        let archive = encoder.finish().unwrap();
        assert!(matches!(
            read_archive(&archive, Limits::default()),
            Err(SourceError::Malformed(_))
        ));
        assert!(matches!(
            extract(&archive, Limits::default()),
            SourceError::Malformed(_)
        ));
    }

    /// A gzip of `head` followed by `zeros` zero bytes, written a block at a time.
    fn gzip_with_zeros(head: &[u8], zeros: usize) -> Vec<u8> {
        let mut encoder = GzBuilder::new().write(Vec::new(), Compression::best());
        encoder.write_all(head).unwrap();
        let block = [0u8; 4096];
        for _ in 0..zeros / block.len() {
            encoder.write_all(&block).unwrap();
        }
        encoder.finish().unwrap()
    }

    #[test]
    fn decompression_stops_at_the_expansion_limit() {
        let limits = Limits {
            max_expanded_bytes: 1 << 20,
            ..Limits::default()
        };
        // A one-file tar, then 16 MiB of zeros (what an end-of-archive padding looks like).
        let snapshot = build_snapshot(files()).unwrap();
        let mut tar_bytes = Vec::new();
        GzDecoder::new(snapshot.archive.as_slice())
            .read_to_end(&mut tar_bytes)
            .unwrap();
        let bomb = gzip_with_zeros(&tar_bytes, 16 << 20);
        let (result, read) = read_entries_counted(bomb.as_slice(), limits, &mut |_, _, _, r| {
            std::io::copy(r, &mut std::io::sink())?;
            Ok(String::new())
        });
        assert!(
            matches!(result, Err(SourceError::ExpandsTooLarge(n)) if n == 1 << 20),
            "{result:?}"
        );
        // Read up to the limit, and not a byte past it.
        assert!(read <= limits.max_expanded_bytes, "{read}");
        assert!(read > limits.max_expanded_bytes - 64 * 1024, "{read}");
        // The same tar with the zeros of a normal padding is read to its end.
        let padded = gzip_with_zeros(&tar_bytes, 8192);
        let (result, read) = read_entries_counted(padded.as_slice(), limits, &mut |_, _, _, r| {
            std::io::copy(r, &mut std::io::sink())?;
            Ok(String::new())
        });
        assert_eq!(result.unwrap().len(), 2);
        assert_eq!(read, tar_bytes.len() as u64 + 8192);
    }

    #[test]
    fn pax_and_gnu_metadata_are_not_files_but_what_changes_entries_is_refused() {
        let global = |record: &'static [u8]| {
            raw_archive(&[
                (
                    b"pax_global_header",
                    tar::EntryType::XGlobalHeader,
                    record,
                    None,
                ),
                (b"run.sh", tar::EntryType::Regular, b"x", None),
            ])
        };
        let got = read_archive(
            &global(b"52 comment=0123456789012345678901234567890123456789\n"),
            Limits::default(),
        )
        .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].path, "run.sh");
        for record in [
            &b"16 path=evil.sh\n"[..],
            b"11 size=99\n",
            b"15 linkpath=ab\n",
        ] {
            let error = read_archive(&global(record), Limits::default()).unwrap_err();
            assert!(matches!(error, SourceError::Malformed(_)), "{error}");
        }
        // A PAX sparse file (format 1.0: a regular entry whose content is a sparse map).
        let sparse = raw_archive(&[
            (
                b"pax",
                tar::EntryType::XHeader,
                b"22 GNU.sparse.major=1\n",
                None,
            ),
            (b"holes", tar::EntryType::Regular, b"x", None),
        ]);
        let error = read_archive(&sparse, Limits::default()).unwrap_err();
        assert!(
            matches!(&error, SourceError::ForbiddenEntryType(p) if p == "holes"),
            "{error}"
        );
        // The PAX size overrides the header's: the content is read at that size.
        let sized = raw_archive(&[
            (b"pax", tar::EntryType::XHeader, b"10 size=2\n", None),
            (b"two", tar::EntryType::Regular, b"ab", Some(0)),
        ]);
        let got = read_archive(&sized, Limits::default()).unwrap();
        assert_eq!(got[0].content, b"ab");
        // A plain (not gzip-compressed) tar is read too.
        let snapshot = build_snapshot(files()).unwrap();
        let mut tar_bytes = Vec::new();
        GzDecoder::new(snapshot.archive.as_slice())
            .read_to_end(&mut tar_bytes)
            .unwrap();
        assert_eq!(
            read_archive(&tar_bytes, Limits::default()).unwrap().len(),
            2
        );
        // Non-zero bytes after the end of the archive are refused.
        tar_bytes.extend_from_slice(b"more");
        assert!(matches!(
            read_archive(&tar_bytes, Limits::default()),
            Err(SourceError::Malformed(_))
        ));
    }
}

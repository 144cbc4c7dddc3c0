//! Where the database is, and what it is: multi-host connection strings as libpq reads them and
//! high-availability managers hand them out (`postgres://h1:p1,h2:p2/db?target_session_attrs=
//! read-write`), the host a command needs among them, and what a session knows of the server it
//! reached (primary or standby, synchronous standbys, the epoch: impl/sql/database_select_replication.sql).
//!
//! sqlx's `PgConnectOptions` holds one host. [`DatabaseUrl`] splits the host list (and the
//! libpq parameters that speak of it: `host`, `port`, `target_session_attrs`, `connect_timeout`,
//! `load_balance_hosts`); every host then becomes a single-host URL that sqlx parses as before
//! (user, password, database, `sslmode`, `options`, ... are sqlx's own parsing).

use crate::error::Error;
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions as _, Connection as _, PgConnection, Postgres, Row as _};
use std::fmt;
use std::time::Duration;

/// libpq's `target_session_attrs`: which session is acceptable among the hosts tried in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetSessionAttrs {
    /// Any session (libpq's default): the first host that accepts a connection.
    Any,
    /// A session that accepts writes by default: not in recovery, `default_transaction_read_only`
    /// off.
    ReadWrite,
    /// A session that does not accept writes by default (a standby, or a read-only default).
    ReadOnly,
    /// A server not in recovery.
    Primary,
    /// A server in recovery (a standby).
    Standby,
    /// A standby if any host is one, else any session.
    PreferStandby,
}

impl TargetSessionAttrs {
    /// The libpq spelling of a value (`read-write`, ...).
    pub fn parse(value: &str) -> Result<Self, UrlError> {
        Ok(match value {
            "any" => Self::Any,
            "read-write" => Self::ReadWrite,
            "read-only" => Self::ReadOnly,
            "primary" => Self::Primary,
            "standby" => Self::Standby,
            "prefer-standby" => Self::PreferStandby,
            other => return Err(UrlError::TargetSessionAttrs(other.to_owned())),
        })
    }

    /// The libpq spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Any => "any",
            Self::ReadWrite => "read-write",
            Self::ReadOnly => "read-only",
            Self::Primary => "primary",
            Self::Standby => "standby",
            Self::PreferStandby => "prefer-standby",
        }
    }

    /// Whether a session whose server is in `state` is acceptable (`prefer-standby` accepts a
    /// standby here; [`resolve`] falls back to any session when no host is one).
    pub fn accepts(self, state: &ReplicationState) -> bool {
        match self {
            Self::Any => true,
            Self::ReadWrite => !state.in_recovery && !state.read_only,
            Self::ReadOnly => state.in_recovery || state.read_only,
            Self::Primary => !state.in_recovery,
            Self::Standby | Self::PreferStandby => state.in_recovery,
        }
    }

    /// What a command that writes (`serve`, `migrate`, `stress`) looks for, whatever the URL asks:
    /// a session that accepts writes (`primary` stays `primary`). A URL asking for a standby or a
    /// read-only session is refused (it names no host such a command can use).
    pub fn for_writes(self) -> Result<Self, UrlError> {
        match self {
            Self::Any | Self::ReadWrite => Ok(Self::ReadWrite),
            Self::Primary => Ok(Self::Primary),
            Self::ReadOnly | Self::Standby | Self::PreferStandby => {
                Err(UrlError::WritesNeedAPrimary(self.as_str()))
            }
        }
    }
}

/// One host of a URL's host list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// The host name or address, percent-decoded, without IPv6 brackets; a path starting with
    /// `/` is a Unix-domain socket directory; empty: sqlx's default host.
    pub name: String,
    /// Its port (`None`: the default, `PGPORT` or 5432).
    pub port: Option<u16>,
}

/// Why a URL is not one we can use. Never contains the password.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("a PostgreSQL URL starts with postgres:// or postgresql://")]
    Scheme,
    #[error("a PostgreSQL URL has no #fragment")]
    Fragment,
    #[error("host {0} of the host list is empty (h1:p1,h2:p2)")]
    EmptyHost(usize),
    #[error("the port {port:?} of host {host} is not a number from 1 to 65535")]
    Port { host: usize, port: String },
    #[error("host {0}: an IPv6 address is written in brackets ([::1]:5432)")]
    Ipv6Brackets(usize),
    #[error("host {0}: {1:?} between brackets is not an IPv6 address")]
    Ipv6Address(usize, String),
    #[error("{hosts} hosts and {ports} ports: give one port for all hosts or one per host")]
    PortCount { hosts: usize, ports: usize },
    #[error("the {0} is not valid percent-encoded UTF-8")]
    Encoding(&'static str),
    #[error("the query parameter {0:?} has no value (name=value)")]
    Parameter(String),
    #[error(
        "target_session_attrs={0:?} is not one of any, read-write, read-only, primary, standby, \
         prefer-standby"
    )]
    TargetSessionAttrs(String),
    #[error("connect_timeout={0:?} is not a whole number of seconds")]
    ConnectTimeout(String),
    #[error("load_balance_hosts={0:?} is not supported: hosts are tried in the order given")]
    LoadBalanceHosts(String),
    #[error(
        "target_session_attrs={0} names no host a command that writes can use: use read-write \
         (or primary)"
    )]
    WritesNeedAPrimary(&'static str),
    #[error("host {host}: {message}")]
    Options { host: usize, message: String },
    /// An `@` after the end of the host list: the user information (most likely the password)
    /// holds an unencoded `/` or `?`, so the URL cannot be split where it was meant to. Nothing
    /// of the URL is shown: any piece of it could be the password.
    #[error(
        "the URL has an '@' after its host list: a password or user name with an unencoded '/', \
         '?' or '#' (percent-encode them: %2F, %3F, %23; an '@' in a parameter: %40); the URL \
         is not shown, since any part of it could be the password"
    )]
    UnencodedUserinfo,
}

/// A PostgreSQL URL with one or more hosts (`Debug` hides the user information).
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl {
    scheme: String,
    /// `user[:password]`, as written (percent-encoded).
    userinfo: Option<String>,
    /// The authority as written, for a URL that names no host (sqlx's default host then).
    authority: String,
    /// `/dbname` as written, or empty.
    path: String,
    /// The query parameters sqlx reads, as written (`name=value`).
    params: Vec<String>,
    hosts: Vec<Host>,
    target_session_attrs: TargetSessionAttrs,
    connect_timeout: Option<Duration>,
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseUrl")
            .field("hosts", &self.hosts)
            .field("path", &self.path)
            .field("target_session_attrs", &self.target_session_attrs)
            .finish_non_exhaustive()
    }
}

/// What a host name must have escaped to be one query parameter's value (sqlx reads the query
/// as a form: `+` is a space there).
const QUERY_VALUE: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'&')
    .add(b'+')
    .add(b'=')
    .add(b'[')
    .add(b']');

fn decode(text: &str, what: &'static str) -> Result<String, UrlError> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| UrlError::Encoding(what))
}

fn parse_port(text: &str, host: usize) -> Result<u16, UrlError> {
    let bad = || UrlError::Port {
        host,
        port: text.to_owned(),
    };
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    text.parse::<u16>()
        .ok()
        .filter(|port| *port > 0)
        .ok_or_else(bad)
}

/// One `host[:port]` or `[ipv6][:port]` of the authority (`position` counts from 1).
fn parse_hostspec(spec: &str, position: usize) -> Result<Host, UrlError> {
    if spec.is_empty() {
        return Err(UrlError::EmptyHost(position));
    }
    let (name, port) = if let Some(rest) = spec.strip_prefix('[') {
        let (address, after) = rest
            .split_once(']')
            .ok_or(UrlError::Ipv6Brackets(position))?;
        let address = decode(address, "host")?;
        if address.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(UrlError::Ipv6Address(position, address));
        }
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => return Err(UrlError::Ipv6Brackets(position)),
            },
        };
        (address, port)
    } else {
        match spec.split_once(':') {
            Some((_, port)) if port.contains(':') => return Err(UrlError::Ipv6Brackets(position)),
            Some((name, port)) => (decode(name, "host")?, Some(port)),
            None => (decode(spec, "host")?, None),
        }
    };
    let port = port.map(|p| parse_port(p, position)).transpose()?;
    Ok(Host { name, port })
}

impl DatabaseUrl {
    /// Parse a `postgres://` or `postgresql://` URL with one or more hosts in its authority
    /// (`h1:p1,h2:p2`, IPv6 in brackets, percent-encoded names) or in `host=`/`port=` lists.
    pub fn parse(url: &str) -> Result<Self, UrlError> {
        let (scheme, rest) = url.split_once("://").ok_or(UrlError::Scheme)?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "postgres" && scheme != "postgresql" {
            return Err(UrlError::Scheme);
        }
        if rest.contains('#') {
            return Err(UrlError::Fragment);
        }
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        if tail.contains('@') {
            // Refused before any piece is parsed: a piece of a misplaced password would
            // otherwise be quoted as a host, a port or a parameter.
            return Err(UrlError::UnencodedUserinfo);
        }
        let (path, query) = match tail.split_once('?') {
            Some((path, query)) => (path, query),
            None => (tail, ""),
        };
        let (userinfo, hostlist) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo.to_owned()), hosts),
            None => (None, authority),
        };
        let mut hosts = if hostlist.is_empty() {
            vec![Host {
                name: String::new(),
                port: None,
            }]
        } else if hostlist.starts_with(':') && !hostlist[1..].contains([':', ',']) {
            // `postgres://:5433/db`: the default host on a port.
            let port = parse_port(&hostlist[1..], 1)?;
            vec![Host {
                name: String::new(),
                port: Some(port),
            }]
        } else {
            hostlist
                .split(',')
                .enumerate()
                .map(|(i, spec)| parse_hostspec(spec, i + 1))
                .collect::<Result<Vec<_>, _>>()?
        };
        let mut params = Vec::new();
        let mut target_session_attrs = TargetSessionAttrs::Any;
        let mut connect_timeout = None;
        let mut ports: Option<Vec<String>> = None;
        for piece in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = piece
                .split_once('=')
                .ok_or_else(|| UrlError::Parameter(piece.to_owned()))?;
            let key = decode(key, "query parameter name")?;
            match key.as_str() {
                "target_session_attrs" => {
                    target_session_attrs =
                        TargetSessionAttrs::parse(&decode(value, "target_session_attrs")?)?;
                }
                "connect_timeout" => {
                    let text = decode(value, "connect_timeout")?;
                    let seconds: u64 = text
                        .trim()
                        .parse()
                        .map_err(|_| UrlError::ConnectTimeout(text.clone()))?;
                    // libpq: 0 (or nothing) waits forever; a positive value under 2 is 2.
                    connect_timeout = (seconds > 0).then(|| Duration::from_secs(seconds.max(2)));
                }
                "load_balance_hosts" => {
                    let text = decode(value, "load_balance_hosts")?;
                    if text != "disable" {
                        return Err(UrlError::LoadBalanceHosts(text));
                    }
                }
                "host" => {
                    let list = decode(value, "host")?;
                    hosts = list
                        .split(',')
                        .enumerate()
                        .map(|(i, name)| {
                            if name.is_empty() {
                                Err(UrlError::EmptyHost(i + 1))
                            } else {
                                Ok(Host {
                                    name: name.to_owned(),
                                    port: None,
                                })
                            }
                        })
                        .collect::<Result<_, _>>()?;
                }
                "port" => {
                    ports = Some(
                        decode(value, "port")?
                            .split(',')
                            .map(str::to_owned)
                            .collect(),
                    );
                }
                _ => params.push(piece.to_owned()),
            }
        }
        if let Some(ports) = ports {
            let parsed = ports
                .iter()
                .enumerate()
                .map(|(i, p)| parse_port(p, i + 1))
                .collect::<Result<Vec<_>, _>>()?;
            match (parsed.len(), hosts.len()) {
                (1, _) => hosts.iter_mut().for_each(|h| h.port = Some(parsed[0])),
                (p, h) if p == h => hosts
                    .iter_mut()
                    .zip(parsed)
                    .for_each(|(host, port)| host.port = Some(port)),
                (p, h) => return Err(UrlError::PortCount { hosts: h, ports: p }),
            }
        }
        let url = DatabaseUrl {
            scheme,
            userinfo,
            authority: authority.to_owned(),
            path: path.to_owned(),
            params,
            hosts,
            target_session_attrs,
            connect_timeout,
        };
        // Every host's URL must be one sqlx reads (a bad sslmode, user encoding, ...).
        for i in 0..url.hosts.len() {
            url.host_options(i)?;
        }
        Ok(url)
    }

    /// The hosts, in the order they are tried.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// The URL's `target_session_attrs` (default `any`).
    pub fn target_session_attrs(&self) -> TargetSessionAttrs {
        self.target_session_attrs
    }

    /// The URL's `connect_timeout` (`None`: not given, or 0).
    pub fn connect_timeout(&self) -> Option<Duration> {
        self.connect_timeout
    }

    /// A single-host URL for host `index` that sqlx reads: the host and port as `host=` and
    /// `port=` parameters (so IPv6 addresses and socket directories need no brackets or
    /// escapes), every other parameter as written.
    pub fn host_url(&self, index: usize) -> String {
        let host = &self.hosts[index];
        let mut url = format!("{}://", self.scheme);
        let mut params = self.params.clone();
        if host.name.is_empty() && self.hosts.len() == 1 && host.port.is_none() {
            url.push_str(&self.authority);
        } else {
            if let Some(userinfo) = &self.userinfo {
                url.push_str(userinfo);
                url.push('@');
            }
            url.push_str("localhost");
            if !host.name.is_empty() {
                params.push(format!(
                    "host={}",
                    utf8_percent_encode(&host.name, QUERY_VALUE)
                ));
            }
            if let Some(port) = host.port {
                params.push(format!("port={port}"));
            }
        }
        url.push_str(&self.path);
        if !params.is_empty() {
            url.push('?');
            url.push_str(&params.join("&"));
        }
        url
    }

    /// sqlx's connection options for host `index`.
    pub fn host_options(&self, index: usize) -> Result<PgConnectOptions, UrlError> {
        self.host_url(index)
            .parse::<PgConnectOptions>()
            .map_err(|error| UrlError::Options {
                host: index + 1,
                message: error.to_string(),
            })
    }
}

/// `host:port` (`[v6]:port`; a socket directory and its port) of a connection's options.
pub fn address(options: &PgConnectOptions) -> String {
    if let Some(socket) = options.get_socket() {
        return format!("{}:{}", socket.display(), options.get_port());
    }
    let host = options.get_host();
    if host.contains(':') {
        format!("[{host}]:{}", options.get_port())
    } else {
        format!("{host}:{}", options.get_port())
    }
}

/// Primary or standby.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Not in recovery: it accepts writes.
    Primary,
    /// In recovery (a streaming or archive standby): read-only.
    Standby,
}

impl Role {
    /// `primary` or `standby`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Standby => "standby",
        }
    }
}

/// What a session knows of the server it reached (impl/sql/database_select_replication.sql).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicationState {
    /// `pg_is_in_recovery()`: a standby.
    pub in_recovery: bool,
    /// `transaction_read_only` of the session (a standby, or `default_transaction_read_only`).
    pub read_only: bool,
    /// The session's `synchronous_commit`.
    pub synchronous_commit: String,
    /// The server's `synchronous_standby_names` (empty: no commit waits for a standby).
    pub synchronous_standby_names: String,
    /// Standbys whose `sync_state` is `sync` or `quorum` now (`None`: this role may not see it;
    /// it needs `pg_read_all_stats`).
    pub synchronous_standbys: Option<i64>,
    /// The WAL timeline - 1 (`None`: a standby that receives no WAL now).
    pub epoch: Option<i64>,
}

impl ReplicationState {
    /// Primary or standby.
    pub fn role(&self) -> Role {
        if self.in_recovery {
            Role::Standby
        } else {
            Role::Primary
        }
    }
}

/// Read what the session knows of its server (one statement, no table read).
pub async fn replication_state<'c, E>(executor: E) -> Result<ReplicationState, Error>
where
    E: sqlx::Executor<'c, Database = Postgres>,
{
    let row = sqlx::query(crate::sql::DATABASE_SELECT_REPLICATION.issue())
        .fetch_one(executor)
        .await?;
    Ok(ReplicationState {
        in_recovery: row.try_get("in_recovery")?,
        read_only: row.try_get("read_only")?,
        synchronous_commit: row.try_get("synchronous_commit")?,
        synchronous_standby_names: row.try_get("synchronous_standby_names")?,
        synchronous_standbys: row.try_get("synchronous_standbys")?,
        epoch: row.try_get("epoch")?,
    })
}

/// What became of one host when [`resolve`] tried it.
#[derive(Debug)]
pub enum Attempt {
    /// No session: refused, unanswered, authentication, ... (sqlx's message: never a password).
    Unreachable(String),
    /// No answer within the timeout.
    TimedOut(Duration),
    /// A session, of the wrong kind.
    Unsuitable(ReplicationState),
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attempt::Unreachable(error) => write!(f, "cannot connect: {error}"),
            Attempt::TimedOut(timeout) => {
                write!(f, "no answer within {} s", timeout.as_secs_f64())
            }
            Attempt::Unsuitable(state) if state.in_recovery => {
                write!(f, "a standby (pg_is_in_recovery() is true)")
            }
            Attempt::Unsuitable(_) => write!(f, "read-only (default_transaction_read_only is on)"),
        }
    }
}

/// No host of a URL is what a command needs: every host tried and what became of it.
#[derive(Debug, thiserror::Error)]
pub struct ResolveError {
    /// What was looked for.
    pub wanted: TargetSessionAttrs,
    /// Each host's address and what became of it, in the order tried.
    pub tried: Vec<(String, Attempt)>,
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let wanted = match self.wanted {
            TargetSessionAttrs::Any => "reachable",
            TargetSessionAttrs::ReadWrite => "a primary that accepts writes",
            TargetSessionAttrs::Primary => "a primary",
            TargetSessionAttrs::ReadOnly => "read-only",
            TargetSessionAttrs::Standby | TargetSessionAttrs::PreferStandby => "a standby",
        };
        match self.tried.as_slice() {
            [(address, Attempt::Unreachable(error))] => {
                return write!(f, "cannot connect to PostgreSQL at {address}: {error}");
            }
            [(address, Attempt::TimedOut(timeout))] => {
                return write!(
                    f,
                    "cannot connect to PostgreSQL at {address}: no answer within {} s",
                    timeout.as_secs_f64()
                );
            }
            [(address, attempt)] => {
                return write!(
                    f,
                    "the database at {address} is not {wanted}: {attempt}{}",
                    if matches!(attempt, Attempt::Unsuitable(s) if s.in_recovery) {
                        "; a command that writes needs the primary: name it, or list every \
                         host (postgres://h1:p1,h2:p2/db?target_session_attrs=read-write)"
                    } else {
                        ""
                    }
                );
            }
            _ => {}
        }
        write!(f, "no host of the database URL is {wanted}:")?;
        for (i, (address, attempt)) in self.tried.iter().enumerate() {
            write!(f, "{} {address}: {attempt}", if i == 0 { "" } else { ";" })?;
        }
        Ok(())
    }
}

/// A host found by [`resolve`]: its index in the URL, its single-host URL and options, its
/// address and what its session said.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub index: usize,
    pub url: String,
    pub options: PgConnectOptions,
    pub address: String,
    pub state: ReplicationState,
}

/// Try the URL's hosts in order (each within `timeout`, or the URL's `connect_timeout`) and keep
/// the first whose session `wanted` accepts (`prefer-standby`: the first standby, else the first
/// host that answers), as libpq does. Returns the host and its open connection.
pub async fn resolve(
    url: &DatabaseUrl,
    wanted: TargetSessionAttrs,
    timeout: Duration,
) -> Result<(Resolved, PgConnection), ResolveError> {
    let timeout = url.connect_timeout().unwrap_or(timeout);
    let mut tried = Vec::new();
    let mut fallback: Option<(Resolved, PgConnection)> = None;
    for index in 0..url.hosts().len() {
        let options = match url.host_options(index) {
            Ok(options) => options,
            Err(error) => {
                tried.push((
                    format!("host {}", index + 1),
                    Attempt::Unreachable(error.to_string()),
                ));
                continue;
            }
        };
        let address = address(&options);
        let session = async {
            let mut connection = options.connect().await?;
            let state = replication_state(&mut connection).await;
            match state {
                Ok(state) => Ok((connection, state)),
                Err(error) => {
                    let _ = connection.close().await;
                    Err(match error {
                        Error::Database(error) => error,
                        other => sqlx::Error::Protocol(other.to_string()),
                    })
                }
            }
        };
        match tokio::time::timeout(timeout, session).await {
            Err(_) => tried.push((address, Attempt::TimedOut(timeout))),
            Ok(Err(error)) => tried.push((address, Attempt::Unreachable(error.to_string()))),
            Ok(Ok((connection, state))) => {
                let resolved = Resolved {
                    index,
                    url: url.host_url(index),
                    options,
                    address: address.clone(),
                    state: state.clone(),
                };
                if wanted.accepts(&state) {
                    if let Some((_, spare)) = fallback.take() {
                        let _ = spare.close().await;
                    }
                    return Ok((resolved, connection));
                }
                if wanted == TargetSessionAttrs::PreferStandby && fallback.is_none() {
                    fallback = Some((resolved, connection));
                } else {
                    let _ = connection.close().await;
                }
                tried.push((address, Attempt::Unsuitable(state)));
            }
        }
    }
    fallback.ok_or(ResolveError { wanted, tried })
}

#[cfg(test)]
mod tests {
    use super::{DatabaseUrl, Host, TargetSessionAttrs, UrlError};

    fn host(name: &str, port: Option<u16>) -> Host {
        Host {
            name: name.to_owned(),
            port,
        }
    }

    #[test]
    fn a_host_list_is_read_in_order_with_its_ports() {
        let url = DatabaseUrl::parse(
            "postgres://u:p%40ss@db1.example:5433,db2.example,10.0.0.3:6000/app?target_session_attrs=read-write",
        )
        .expect("a multi-host URL");
        assert_eq!(
            url.hosts(),
            [
                host("db1.example", Some(5433)),
                host("db2.example", None),
                host("10.0.0.3", Some(6000))
            ]
        );
        assert_eq!(url.target_session_attrs(), TargetSessionAttrs::ReadWrite);
        let second = url.host_options(1).expect("options");
        assert_eq!(second.get_host(), "db2.example");
        // A host without a port gets sqlx's (and libpq's) default port.
        let default_port = "postgres://u@x/app"
            .parse::<sqlx::postgres::PgConnectOptions>()
            .expect("single host")
            .get_port();
        assert_eq!(second.get_port(), default_port);
        let first = url.host_options(0).expect("options");
        assert_eq!((first.get_host(), first.get_port()), ("db1.example", 5433));
        assert_eq!(first.get_username(), "u");
        assert_eq!(first.get_database(), Some("app"));
        let third = url.host_options(2).expect("options");
        assert_eq!((third.get_host(), third.get_port()), ("10.0.0.3", 6000));
        // The password is decoded by sqlx, and never shown by Debug.
        assert!(url.host_url(0).contains("u:p%40ss@"), "{}", url.host_url(0));
        assert!(!format!("{url:?}").contains("p%40ss"), "{url:?}");
    }

    #[test]
    fn ipv6_addresses_are_in_brackets_and_reach_sqlx_without_them() {
        let url = DatabaseUrl::parse("postgresql://[::1]:5433,[fe80::1%25eth0],[2001:db8::2]/db")
            .expect_err("a zone id is not an IPv6 address we accept");
        assert!(matches!(url, UrlError::Ipv6Address(2, _)), "{url}");
        let url = DatabaseUrl::parse("postgresql://[::1]:5433,[2001:db8::2]/db").expect("IPv6");
        assert_eq!(
            url.hosts(),
            [host("::1", Some(5433)), host("2001:db8::2", None)]
        );
        let options = url.host_options(0).expect("options");
        assert_eq!((options.get_host(), options.get_port()), ("::1", 5433));
        assert_eq!(super::address(&options), "[::1]:5433");
    }

    #[test]
    fn percent_encoded_hosts_and_socket_directories_are_decoded() {
        let url = DatabaseUrl::parse("postgres://%2Fvar%2Frun%2Fpostgresql,db%2Dtwo:7/db")
            .expect("encoded hosts");
        assert_eq!(
            url.hosts(),
            [host("/var/run/postgresql", None), host("db-two", Some(7))]
        );
        let socket = url.host_options(0).expect("options");
        assert_eq!(
            socket.get_socket().map(|p| p.display().to_string()),
            Some("/var/run/postgresql".to_owned())
        );
    }

    #[test]
    fn host_and_port_parameters_are_lists_too() {
        let url = DatabaseUrl::parse("postgres:///db?host=a,b&port=1,2&sslmode=disable")
            .expect("host and port lists");
        assert_eq!(url.hosts(), [host("a", Some(1)), host("b", Some(2))]);
        let url = DatabaseUrl::parse("postgres://a,b/db?port=9").expect("one port for all");
        assert_eq!(url.hosts(), [host("a", Some(9)), host("b", Some(9))]);
        assert_eq!(
            DatabaseUrl::parse("postgres://a,b,c/db?port=1,2"),
            Err(UrlError::PortCount { hosts: 3, ports: 2 })
        );
    }

    #[test]
    fn other_parameters_reach_sqlx_as_written() {
        let url = DatabaseUrl::parse(
            "postgres://u@a:1,b:2/db?options[search_path]=lw&application_name=x%20y&connect_timeout=3",
        )
        .expect("params");
        let options = url.host_options(1).expect("options");
        assert_eq!(options.get_application_name(), Some("x y"));
        assert!(
            options
                .get_options()
                .is_some_and(|o| o.contains("search_path=lw")),
            "{:?}",
            options.get_options()
        );
        assert_eq!(
            url.connect_timeout(),
            Some(std::time::Duration::from_secs(3))
        );
        // A single-host URL with no host list parameters is sqlx's URL again.
        let single = DatabaseUrl::parse("postgres://u@127.0.0.1:5432/db?sslmode=disable")
            .expect("single host");
        let options = single.host_options(0).expect("options");
        assert_eq!(
            (options.get_host(), options.get_port()),
            ("127.0.0.1", 5432)
        );
        let bare = DatabaseUrl::parse("postgres:///db").expect("no host");
        assert_eq!(bare.host_url(0), "postgres:///db");
    }

    #[test]
    fn every_target_session_attrs_value_of_libpq_is_read() {
        for value in [
            "any",
            "read-write",
            "read-only",
            "primary",
            "standby",
            "prefer-standby",
        ] {
            let url =
                DatabaseUrl::parse(&format!("postgres://a,b/db?target_session_attrs={value}"))
                    .expect(value);
            assert_eq!(url.target_session_attrs().as_str(), value);
        }
        assert_eq!(
            DatabaseUrl::parse("postgres://a/db").map(|u| u.target_session_attrs()),
            Ok(TargetSessionAttrs::Any)
        );
        assert_eq!(
            TargetSessionAttrs::ReadOnly.for_writes(),
            Err(UrlError::WritesNeedAPrimary("read-only"))
        );
        assert_eq!(
            TargetSessionAttrs::Any.for_writes(),
            Ok(TargetSessionAttrs::ReadWrite)
        );
    }

    #[test]
    fn bad_urls_are_refused_with_what_is_wrong() {
        let cases: [(&str, UrlError); 12] = [
            ("mysql://a/db", UrlError::Scheme),
            ("a:5432/db", UrlError::Scheme),
            ("postgres://a,,b/db", UrlError::EmptyHost(2)),
            ("postgres://a,/db", UrlError::EmptyHost(2)),
            (
                "postgres://a:x/db",
                UrlError::Port {
                    host: 1,
                    port: "x".into(),
                },
            ),
            (
                "postgres://a:1,b:70000/db",
                UrlError::Port {
                    host: 2,
                    port: "70000".into(),
                },
            ),
            (
                "postgres://a:0/db",
                UrlError::Port {
                    host: 1,
                    port: "0".into(),
                },
            ),
            ("postgres://::1:5432/db", UrlError::Ipv6Brackets(1)),
            ("postgres://[::1/db", UrlError::Ipv6Brackets(1)),
            (
                "postgres://a/db?target_session_attrs=master",
                UrlError::TargetSessionAttrs("master".into()),
            ),
            (
                "postgres://a/db?load_balance_hosts=random",
                UrlError::LoadBalanceHosts("random".into()),
            ),
            ("postgres://a/db#x", UrlError::Fragment),
        ];
        for (url, error) in cases {
            assert_eq!(DatabaseUrl::parse(url), Err(error), "{url}");
        }
        assert!(matches!(
            DatabaseUrl::parse("postgres://a/db?sslmode=sometimes"),
            Err(UrlError::Options { host: 1, .. })
        ));
        assert_eq!(
            DatabaseUrl::parse("postgres://a/db?nonsense"),
            Err(UrlError::Parameter("nonsense".into()))
        );
        assert_eq!(
            DatabaseUrl::parse("postgres://a%FF/db"),
            Err(UrlError::Encoding("host"))
        );
        // No message names the password.
        let error = DatabaseUrl::parse("postgres://u:hunter2@a:x/db").expect_err("bad port");
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }

    /// Issue 36: a password holding an unencoded `/` or `?` made the URL split inside the
    /// password, and its first characters were quoted as a port or a parameter. No piece of
    /// the password appears in any message, wherever the unencoded character falls.
    #[test]
    fn a_password_with_an_unencoded_slash_or_question_mark_is_never_quoted() {
        for url in [
            "postgres://leasewright:s3cr/et9@db:5432/app",
            "postgres://leasewright:s3cr?et9@db:5432/app",
            "postgres://leasewright:s3cr?x=et9@db:5432/app",
            "postgres://leasewright:s3cr/et9@db1:5432,db2:5433/app?target_session_attrs=read-write",
            "postgresql://leasewright:/s3cret9@db/app",
            "postgres://leasewright:s3cr#et9@db:5432/app",
        ] {
            let error = DatabaseUrl::parse(url).expect_err(url);
            let message = error.to_string();
            for piece in ["s3cr", "et9", "cret"] {
                assert!(!message.contains(piece), "{url}: {message}");
            }
        }
        assert_eq!(
            DatabaseUrl::parse("postgres://u:a/b@db/app"),
            Err(UrlError::UnencodedUserinfo)
        );
    }
}

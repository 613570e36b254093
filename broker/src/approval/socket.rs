//! The operator's surface: a Unix socket in MINT_HOME, mode 0600, that only a process of Mint's
//! own uid may use (the peer's uid is read from the kernel, `SO_PEERCRED`, not from anything the
//! peer says). The proxy port never accepts a decision and no capability can make one.
//!
//! What this cannot tell apart: a human and a process running as the same uid. An agent that runs
//! as the operator's user can reach this socket too; run agents as another user (`mint run
//! --user`) or in a container (docs/security.md).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::broadcast::error::RecvError;

use super::protocol::{Command, MAX_COMMAND_BYTES, Reply};
use super::{ApprovalBook, Decision, MAX_GRANT};

/// How long a client may take to send its command.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the socket could not be opened, or a command not sent.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Another broker answers on the socket already.
    #[error(
        "another `mint serve` of this MINT_HOME answers on `{0}`; give each broker its own MINT_HOME to decide on its approvals"
    )]
    InUse(PathBuf),
    /// Something that is not a socket is in the way.
    #[error("`{0}` exists and is not a socket; move it away")]
    NotASocket(PathBuf),
    /// The socket's path does not fit a Unix socket address.
    #[error(
        "`{0}` is too long for a Unix socket path (at most 107 bytes); use a shorter MINT_HOME"
    )]
    PathTooLong(PathBuf),
    /// Binding, connecting, reading or writing.
    #[error("the approvals socket `{path}`")]
    Io {
        /// The socket.
        path: PathBuf,
        /// The reason.
        #[source]
        source: io::Error,
    },
    /// No broker listens on the socket.
    #[error(
        "no `mint serve` is listening on `{0}`; approvals are decided while the broker that holds them runs"
    )]
    NoBroker(PathBuf),
    /// The broker answered something that is not a reply.
    #[error("the broker's answer on `{0}` is not understood (a different Mint version?)")]
    Protocol(PathBuf),
}

/// The operator socket of a running broker; the file is removed when this is dropped.
#[derive(Debug)]
pub struct OperatorSocket {
    listener: UnixListener,
    path: PathBuf,
}

// === impl OperatorSocket ===

impl OperatorSocket {
    /// Binds `path`, mode 0600. A socket left by a broker that is gone is replaced; one another
    /// broker answers on is not, and neither is anything that is not a socket.
    pub fn bind(path: &Path) -> Result<OperatorSocket, SocketError> {
        use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
        let io_error = |source| SocketError::Io {
            path: path.to_owned(),
            source,
        };
        if path.as_os_str().len() > 107 {
            return Err(SocketError::PathTooLong(path.to_owned()));
        }
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_socket() => {
                if std::os::unix::net::UnixStream::connect(path).is_ok() {
                    return Err(SocketError::InUse(path.to_owned()));
                }
                std::fs::remove_file(path).map_err(io_error)?;
            }
            Ok(_) => return Err(SocketError::NotASocket(path.to_owned())),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(io_error(error)),
        }
        let listener = UnixListener::bind(path).map_err(io_error)?;
        let socket = OperatorSocket {
            listener,
            path: path.to_owned(),
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io_error)?;
        Ok(socket)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves operators until the task is aborted; each connection on a task of its own.
    pub async fn serve(self, book: Arc<ApprovalBook>) {
        let me = rustix::process::geteuid().as_raw();
        loop {
            let stream = match self.listener.accept().await {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(error = %error, "Approvals socket: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let book = Arc::clone(&book);
            tokio::spawn(async move {
                if let Err(error) = serve_operator(stream, &book, me).await {
                    tracing::debug!(error = %error, "Approvals socket: client ended with an error");
                }
            });
        }
    }
}

impl Drop for OperatorSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One operator connection: the peer check, one command, its reply (and events, for `watch`).
async fn serve_operator(stream: UnixStream, book: &ApprovalBook, me: u32) -> io::Result<()> {
    let credentials = stream.peer_cred()?;
    let (read, mut write) = stream.into_split();
    if credentials.uid() != me {
        tracing::warn!(
            peer.uid = credentials.uid(),
            peer.pid = credentials.pid(),
            "Approvals socket: refused a process of another user"
        );
        let reply = Reply::refused(format!(
            "the approvals socket serves only the user `mint serve` runs as (uid {me})"
        ));
        return send(&mut write, &reply).await;
    }
    let approver = approver(credentials.uid(), credentials.pid());
    let mut read = BufReader::new(read).take(MAX_COMMAND_BYTES as u64 + 1);
    let mut line = String::new();
    let command = match tokio::time::timeout(COMMAND_TIMEOUT, read.read_line(&mut line)).await {
        Err(_) => return send(&mut write, &Reply::refused("no command came in time")).await,
        Ok(read) => {
            read?;
            if !line.ends_with('\n') {
                return send(
                    &mut write,
                    &Reply::refused("a command is one line of JSON of at most 4096 bytes"),
                )
                .await;
            }
            match serde_json::from_str::<Command>(&line) {
                Ok(command) => command,
                Err(_) => {
                    return send(
                        &mut write,
                        &Reply::refused(
                            "not a command: expected one JSON object such as {\"op\":\"list\"}",
                        ),
                    )
                    .await;
                }
            }
        }
    };
    match command {
        Command::List => {
            let (pending, grants) = book.list();
            let reply = Reply {
                ok: true,
                pending: Some(pending),
                grants: Some(grants),
                ..Reply::default()
            };
            send(&mut write, &reply).await
        }
        Command::Approve { id, grant_seconds } => {
            let grant = match grant_seconds {
                None => None,
                Some(seconds) if seconds == 0 || seconds > MAX_GRANT.as_secs() => {
                    return send(&mut write, &Reply::refused("a grant lasts from 1s to 8h")).await;
                }
                Some(seconds) => Some(Duration::from_secs(seconds)),
            };
            let reply = match book.decide(&id, Decision::Approve { grant }, &approver) {
                Ok(grant) => {
                    tracing::info!(approval = %id, approver = %approver, grant = grant.as_deref().unwrap_or("-"), "Approved");
                    Reply {
                        ok: true,
                        grant,
                        approver: Some(approver),
                        ..Reply::default()
                    }
                }
                Err(error) => Reply::refused(error.to_string()),
            };
            send(&mut write, &reply).await
        }
        Command::Deny { id } => {
            let reply = match book.decide(&id, Decision::Deny, &approver) {
                Ok(_) => {
                    tracing::info!(approval = %id, approver = %approver, "Denied");
                    Reply {
                        ok: true,
                        approver: Some(approver),
                        ..Reply::default()
                    }
                }
                Err(error) => Reply::refused(error.to_string()),
            };
            send(&mut write, &reply).await
        }
        Command::Revoke { grant } => {
            let reply = match book.revoke(&grant) {
                Ok(()) => {
                    tracing::info!(grant = %grant, approver = %approver, "Grant revoked");
                    Reply {
                        ok: true,
                        approver: Some(approver),
                        ..Reply::default()
                    }
                }
                Err(error) => Reply::refused(error.to_string()),
            };
            send(&mut write, &reply).await
        }
        Command::Watch => {
            // Subscribed before the list is taken: an event in between is seen twice at worst.
            let mut events = book.subscribe();
            let mut resync = false;
            loop {
                let (pending, grants) = book.list();
                let reply = Reply {
                    ok: true,
                    pending: Some(pending),
                    grants: Some(grants),
                    resync,
                    ..Reply::default()
                };
                send(&mut write, &reply).await?;
                loop {
                    match events.recv().await {
                        Ok(event) => {
                            let mut line = serde_json::to_vec(&event).map_err(io::Error::other)?;
                            line.push(b'\n');
                            write.write_all(&line).await?;
                        }
                        Err(RecvError::Lagged(_)) => break,
                        Err(RecvError::Closed) => return Ok(()),
                    }
                }
                resync = true;
            }
        }
    }
}

async fn send(write: &mut (impl AsyncWriteExt + Unpin), reply: &Reply) -> io::Result<()> {
    let mut line = serde_json::to_vec(reply).map_err(io::Error::other)?;
    line.push(b'\n');
    write.write_all(&line).await?;
    write.flush().await
}

/// Who decides, as the audit record names them: the user name of `uid` when it has one, the uid
/// and the process id (`root (uid 0, pid 4242)`). Only characters the audit field allows.
fn approver(uid: u32, pid: Option<i32>) -> String {
    let name = user_name(uid)
        .map(|name| {
            name.chars()
                .filter(|c| c.is_ascii_graphic() && *c != '"' && *c != '\\')
                .take(32)
                .collect::<String>()
        })
        .filter(|name| !name.is_empty());
    let pid = pid.map_or_else(String::new, |pid| format!(", pid {pid}"));
    match name {
        Some(name) => format!("{name} (uid {uid}{pid})"),
        None => format!("uid {uid}{pid}"),
    }
}

/// The user name of `uid` from `/etc/passwd`, if it lists one (users only a directory service
/// knows are named by their uid alone).
fn user_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let listed: u32 = fields.nth(1)?.parse().ok()?;
        (listed == uid).then(|| name.to_owned())
    })
}

/// A client of the operator socket: `mint approvals`.
#[derive(Debug)]
pub struct OperatorClient {
    path: PathBuf,
    lines: tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
}

// === impl OperatorClient ===

impl OperatorClient {
    /// Sends `command` to the broker at `path` and reads its reply.
    pub async fn send(
        path: &Path,
        command: &Command,
    ) -> Result<(Reply, OperatorClient), SocketError> {
        let io_error = |source| SocketError::Io {
            path: path.to_owned(),
            source,
        };
        let stream = match UnixStream::connect(path).await {
            Ok(stream) => stream,
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
                ) =>
            {
                return Err(SocketError::NoBroker(path.to_owned()));
            }
            Err(error) => return Err(io_error(error)),
        };
        let (read, mut write) = stream.into_split();
        let mut line = serde_json::to_vec(command).map_err(|e| io_error(io::Error::other(e)))?;
        line.push(b'\n');
        write.write_all(&line).await.map_err(io_error)?;
        let mut client = OperatorClient {
            path: path.to_owned(),
            lines: BufReader::new(read).lines(),
        };
        let reply = client
            .next_line()
            .await?
            .ok_or_else(|| SocketError::Protocol(path.to_owned()))?;
        let reply: Reply =
            serde_json::from_str(&reply).map_err(|_| SocketError::Protocol(path.to_owned()))?;
        // The broker reads nothing after the command: the write half may go (a watcher leaves by
        // closing the whole socket, when the client is dropped).
        drop(write);
        Ok((reply, client))
    }

    /// The next line the broker writes (`watch`), or `None` when it closed the socket.
    pub async fn next_line(&mut self) -> Result<Option<String>, SocketError> {
        self.lines
            .next_line()
            .await
            .map_err(|source| SocketError::Io {
                path: self.path.clone(),
                source,
            })
    }
}

//! A real `redis-server` (Debian's package) for one test: started on a private Unix socket in a
//! temporary directory, persistence off (`--save '' --appendonly no`), no TCP port unless asked
//! for (then on 127.0.0.1 only, with TLS if asked), and stopped with the test. It can be killed
//! and started again on the same socket and port, as an outage and a recovery. `redis-cli` (the
//! same package's dependency) talks to it for the tests.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mint_broker::demo::echo_upstream::TestCa;

/// Whether `redis-server` and `redis-cli` are installed. Without them a test says so and
/// passes, except under CI (`CI` set), where `.ci/run` installs them and a missing one fails.
#[track_caller]
pub fn available() -> bool {
    let found = ["redis-server", "redis-cli"].iter().all(|tool| {
        Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    });
    if !found {
        let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
        assert!(
            !ci,
            "redis-server is not installed, and CI must run this test (apt-get install redis-server)"
        );
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "note: skipping: redis-server is missing (apt-get install redis-server)"
        );
    }
    found
}

/// How a [`RedisServer`] listens besides its Unix socket.
#[derive(Debug, Default)]
pub struct RedisOptions {
    /// Also on `127.0.0.1:PORT` (a free port).
    pub tcp: bool,
    /// That port speaks TLS with a certificate from this authority (needs `tcp`).
    pub tls: bool,
}

/// A running `redis-server`.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    args: Vec<String>,
    /// The directory holding the socket, the log and the TLS files.
    pub dir: tempfile::TempDir,
    /// The Unix socket (mode 0700).
    pub socket: PathBuf,
    /// The TCP port, when asked for.
    pub port: Option<u16>,
    /// The CA certificate (PEM file) of the TLS port, when asked for.
    pub ca_file: Option<PathBuf>,
}

// === impl RedisServer ===

impl RedisServer {
    /// A server on a Unix socket only.
    #[track_caller]
    pub fn start() -> RedisServer {
        RedisServer::start_with(RedisOptions::default())
    }

    /// A server listening as `options` say.
    #[track_caller]
    pub fn start_with(options: RedisOptions) -> RedisServer {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("redis.sock");
        let mut args: Vec<String> = vec![
            "--unixsocket".into(),
            socket.display().to_string(),
            "--unixsocketperm".into(),
            "700".into(),
            "--save".into(),
            String::new(),
            "--appendonly".into(),
            "no".into(),
            "--dir".into(),
            dir.path().display().to_string(),
            "--logfile".into(),
            dir.path().join("redis.log").display().to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
        ];
        let mut port = None;
        let mut ca_file = None;
        let free = || {
            TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        match (options.tcp, options.tls) {
            (false, _) => args.extend(["--port".into(), "0".into()]),
            (true, false) => {
                let p = free();
                port = Some(p);
                args.extend(["--port".into(), p.to_string()]);
            }
            (true, true) => {
                let p = free();
                port = Some(p);
                let ca = TestCa::generate().unwrap();
                let (cert, key) = ca.leaf_pem().unwrap();
                let write = |name: &str, text: &str| {
                    let path = dir.path().join(name);
                    std::fs::write(&path, text).unwrap();
                    path.display().to_string()
                };
                let ca_path = dir.path().join("ca.pem");
                ca.write_pem(&ca_path).unwrap();
                args.extend([
                    "--port".into(),
                    "0".into(),
                    "--tls-port".into(),
                    p.to_string(),
                    "--tls-cert-file".into(),
                    write("redis.crt", &cert),
                    "--tls-key-file".into(),
                    write("redis.key", &key),
                    "--tls-ca-cert-file".into(),
                    ca_path.display().to_string(),
                    "--tls-auth-clients".into(),
                    "no".into(),
                ]);
                ca_file = Some(ca_path);
            }
        }
        let mut server = RedisServer {
            child: None,
            args,
            dir,
            socket,
            port,
            ca_file,
        };
        server.launch();
        server
    }

    #[track_caller]
    fn launch(&mut self) {
        let child = Command::new("redis-server")
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.try_cli(&["PING"]).as_deref() != Some("PONG") {
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer on {}: {}",
                self.socket.display(),
                std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis+unix://SOCKET`.
    pub fn unix_url(&self) -> String {
        format!("redis+unix://{}", self.socket.display())
    }

    /// `redis://127.0.0.1:PORT` (`rediss://` with TLS), with `user:password@` when given.
    #[track_caller]
    pub fn tcp_url(&self, credentials: Option<(&str, &str)>) -> String {
        let scheme = if self.ca_file.is_some() {
            "rediss"
        } else {
            "redis"
        };
        let host = if self.ca_file.is_some() {
            "localhost"
        } else {
            "127.0.0.1"
        };
        let auth = credentials.map_or(String::new(), |(user, password)| {
            format!("{user}:{password}@")
        });
        format!("{scheme}://{auth}{host}:{}", self.port.unwrap())
    }

    /// Runs `redis-cli -s SOCKET ARGS...` and returns its output, trimmed.
    #[track_caller]
    pub fn cli(&self, args: &[&str]) -> String {
        self.try_cli(args)
            .unwrap_or_else(|| panic!("redis-cli {args:?} failed"))
    }

    fn try_cli(&self, args: &[&str]) -> Option<String> {
        let output = Command::new("redis-cli")
            .arg("-s")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// The keys matching `pattern`, sorted.
    #[track_caller]
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut keys: Vec<String> = self
            .cli(&["--raw", "KEYS", pattern])
            .lines()
            .filter(|line| !line.is_empty())
            .map(str::to_owned)
            .collect();
        keys.sort();
        keys
    }

    /// The number of entries of the sorted set `key`.
    #[track_caller]
    pub fn zcard(&self, key: &str) -> u64 {
        self.cli(&["ZCARD", key]).parse().unwrap()
    }

    /// Kills the server (SIGKILL: an outage, not a shutdown) and waits for it; what it held is
    /// gone (persistence is off).
    #[track_caller]
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Starts the server again, on the same socket and port.
    #[track_caller]
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// The server's directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

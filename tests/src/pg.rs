//! PostgreSQL for tests: a fresh database per test on the local server, dropped again when the
//! guard goes; a clear skip (or, with `TURNKEY_REQUIRE_PG=1`, a failure) when there is no server.
use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection};
use std::time::Duration;

/// The maintenance database the fresh ones are created from.
pub const ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
const SERVER_URL: &str = "postgres://postgres@127.0.0.1:5432";

/// A database that exists for one test; dropped (forcefully) on Drop.
pub struct PgDatabase {
    pub name: String,
    pub url: String,
}

impl PgDatabase {
    pub fn url(&self) -> &str {
        &self.url
    }
}

async fn connect_admin() -> Result<DatabaseConnection, String> {
    let mut opts = ConnectOptions::new(ADMIN_URL);
    opts.connect_timeout(Duration::from_secs(3))
        .acquire_timeout(Duration::from_secs(3))
        .max_connections(1)
        .sqlx_logging(false);
    match tokio::time::timeout(Duration::from_secs(5), Database::connect(opts)).await {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("connect timed out".into()),
    }
}

/// Creates `turnkey_t_<uuid>` and returns it, or `None` (after one line on stdout) when
/// PostgreSQL is not reachable and `TURNKEY_REQUIRE_PG` is not `1`.
pub async fn fresh_database() -> Option<PgDatabase> {
    let admin = match connect_admin().await {
        Ok(db) => db,
        Err(e) => {
            if crate::require::flag("TURNKEY_REQUIRE_PG") {
                panic!("TURNKEY_REQUIRE_PG=1 but PostgreSQL is not reachable at {ADMIN_URL}: {e}");
            }
            println!("skipping: PostgreSQL not reachable at 127.0.0.1:5432");
            return None;
        }
    };
    let name = format!("turnkey_t_{}", uuid::Uuid::new_v4().simple());
    admin
        .execute_unprepared(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
    if let Err(e) = admin.close().await {
        eprintln!("closing the admin connection: {e}");
    }
    Some(PgDatabase {
        url: format!("{SERVER_URL}/{name}"),
        name,
    })
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop runs outside any async context we can rely on: use a private runtime on a thread.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async {
                let admin = connect_admin().await?;
                let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                let run =
                    tokio::time::timeout(Duration::from_secs(10), admin.execute_unprepared(&sql));
                match run.await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err("DROP DATABASE timed out".to_string()),
                }
            })
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("could not drop test database {}: {e}", self.name),
            Err(_) => eprintln!(
                "could not drop test database {}: thread panicked",
                self.name
            ),
        }
    }
}

/// A connection for a test to read the store behind a running server (SQLite or PostgreSQL),
/// opened for a few statements and closed again. One connection, and no idle or lifetime
/// reaping: sqlx starts no maintenance task, whose pass can race the pool's close and spin
/// (sqlx 0.9), hanging the test's runtime at its end.
pub async fn open(url: &str) -> DatabaseConnection {
    let mut opts = ConnectOptions::new(url.to_owned());
    opts.max_connections(1)
        .min_connections(0)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_timeout(Duration::from_secs(10))
        .acquire_timeout(Duration::from_secs(10))
        .sqlx_logging(false);
    Database::connect(opts)
        .await
        .unwrap_or_else(|e| panic!("cannot open the store at {url}: {e}"))
}

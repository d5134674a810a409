//! `Notifier`: turns the notices other processes send through the database (`storage::notify`)
//! into local wake-ups (SPEC R13.6): event followers of the session, turns waiting on a
//! person's decision, lease waiters, the turn an interrupt request is for, and, for input
//! admitted where nobody drains it (its replica died right after the commit), this process's
//! drain. A notice this process sent itself is skipped where it already woke locally. A
//! `Resync` (notices may have been lost) wakes everyone once; the recovery sweep stays the
//! safety net for queued input.
use crate::deps::Deps;
use crate::remote_interrupt;
use crate::session::registry::SessionRegistry;
use actix::prelude::*;
use std::sync::Arc;
use std::time::Duration;
use turnkey_storage::notify::{Notice, NoticeKind, Notices, Wake};
use turnkey_storage::{now_ms, InstanceId, SessionId};

/// How long input admitted (or a lease released) elsewhere is left to its own replica before
/// this one checks whether anyone drains it.
pub const PICK_UP_AFTER: Duration = Duration::from_millis(300);
/// How often interrupt requests addressed here are swept even without a notice.
const INTERRUPT_SWEEP: Duration = Duration::from_secs(30);

pub struct Notifier {
    deps: Arc<Deps>,
    registry: SessionRegistry,
    /// This process's origin in notices.
    origin: InstanceId,
    /// A sweep of interrupt requests is under way: resyncs meanwhile need no second one.
    sweeping: bool,
}

impl Notifier {
    /// Starts consuming `notices` on the current arbiter.
    pub fn start(
        deps: Arc<Deps>,
        registry: SessionRegistry,
        origin: InstanceId,
        notices: Notices,
    ) -> Addr<Self> {
        Self::create(move |ctx| {
            let stream = futures::stream::unfold(notices, |mut n| async move {
                n.recv().await.map(|wake| (wake, n))
            });
            ctx.add_stream(stream);
            ctx.run_interval(INTERRUPT_SWEEP, |act, ctx| act.sweep_interrupts(ctx));
            Self {
                deps,
                registry,
                origin,
                sweeping: false,
            }
        })
    }

    fn on_notice(&mut self, n: Notice, ctx: &mut Context<Self>) {
        let own = n.origin == self.origin;
        match n.kind {
            // This process published its own events to the hub and woke its own waiters.
            NoticeKind::Events if !own => self.deps.event_wakes.wake(n.session),
            NoticeKind::Decision if !own => self.deps.wakeups.wake(n.session),
            NoticeKind::Released if !own => {
                self.deps.lease_wakes.wake(n.session);
                self.pick_up_later(n.session, ctx);
            }
            NoticeKind::Admitted if !own => {
                // A review of the session running here gives way to the input at once.
                self.registry.cancel_review(n.session);
                self.pick_up_later(n.session, ctx);
            }
            NoticeKind::Interrupt => {
                if let Some(turn) = n.turn {
                    let (deps, registry) = (self.deps.clone(), self.registry.clone());
                    actix::spawn(async move {
                        remote_interrupt::act_on(&deps, &registry, n.session, turn).await;
                    });
                }
            }
            NoticeKind::Interrupted => self.deps.interrupt_acks.wake(n.session),
            _ => {}
        }
    }

    /// After [`PICK_UP_AFTER`], drains `session` here if input waits and no live replica
    /// holds its lease: the replica that admitted it died, or stopped, before draining it.
    fn pick_up_later(&self, session: SessionId, ctx: &mut Context<Self>) {
        let (deps, registry) = (self.deps.clone(), self.registry.clone());
        ctx.run_later(PICK_UP_AFTER, move |_, _| {
            actix::spawn(async move {
                if deps.shutdown.is_cancelled() {
                    return;
                }
                match unattended(&deps, session).await {
                    Ok(true) => {
                        tracing::info!(%session, "picking up input no replica drains");
                        registry.drain(session);
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(%session, error = %e, "cannot check the queue; the recovery sweep will")
                    }
                }
            });
        });
    }

    fn resync(&mut self, ctx: &mut Context<Self>) {
        self.deps.event_wakes.wake_all();
        self.deps.wakeups.wake_all();
        self.deps.lease_wakes.wake_all();
        self.deps.interrupt_acks.wake_all();
        self.sweep_interrupts(ctx);
    }

    fn sweep_interrupts(&mut self, ctx: &mut Context<Self>) {
        if self.sweeping {
            return;
        }
        self.sweeping = true;
        let (deps, registry) = (self.deps.clone(), self.registry.clone());
        let sweep = async move { remote_interrupt::sweep(&deps, &registry).await };
        ctx.spawn(
            sweep
                .into_actor(self)
                .map(|(), act, _| act.sweeping = false),
        );
    }
}

/// Input waits in `session`'s queue and no live replica holds its lease.
async fn unattended(deps: &Deps, session: SessionId) -> Result<bool, turnkey_storage::StoreError> {
    if deps.store.next_queued(session).await?.is_none() {
        return Ok(false);
    }
    Ok(match deps.store.get_lease(session).await? {
        Some(l) => match &l.holder {
            Some(h) => l.expires_at <= now_ms() || deps.instance.is_dead(h),
            None => true,
        },
        None => true,
    })
}

impl Actor for Notifier {
    type Context = Context<Self>;
}

impl StreamHandler<Wake> for Notifier {
    fn handle(&mut self, wake: Wake, ctx: &mut Context<Self>) {
        match wake {
            Wake::Notice(n) => self.on_notice(n, ctx),
            Wake::Resync => self.resync(ctx),
        }
    }

    fn finished(&mut self, ctx: &mut Context<Self>) {
        tracing::error!("the notice listener stopped; other replicas' changes are seen by the recovery sweep only");
        ctx.stop();
    }
}

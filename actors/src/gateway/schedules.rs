//! The gateway's schedules (SPEC R1.5): created, listed and deleted through the scheduler.
use super::Gateway;
use crate::error::GatewayError;
use crate::scheduler::{self, ScheduleRequest};
use turnkey_storage::*;

impl Gateway {
    /// `POST /v1/schedules`: a schedule on a session `principal` may act on (SPEC R1.5).
    pub async fn create_schedule(
        &self,
        principal: &Principal,
        req: ScheduleRequest,
    ) -> Result<Schedule, GatewayError> {
        scheduler::create(&self.deps, &self.scheduler, principal, req).await
    }

    /// `GET /v1/schedules`: all for the operator, else those on `principal`'s sessions.
    pub async fn schedules(&self, principal: &Principal) -> Result<Vec<Schedule>, GatewayError> {
        scheduler::list(&self.deps, principal).await
    }

    /// `DELETE /v1/schedules/{id}`: stops its future due times.
    pub async fn delete_schedule(
        &self,
        principal: &Principal,
        id: ScheduleId,
    ) -> Result<(), GatewayError> {
        scheduler::delete(&self.deps, &self.scheduler, principal, id).await
    }
}

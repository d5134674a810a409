//! Responses API responses deleted by their owner. A response is an admission; deleting it
//! keeps the admission and the session's messages and only makes the response id answer 404.
use super::{is_unique_violation, Result, Store};
use crate::entity::response_deletion;
use crate::ids::{now_ms, AdmissionId, SessionId};
use sea_orm::{ActiveValue::Set, EntityTrait};

impl Store {
    /// Marks the response of `admission` deleted; `false` when it was already.
    pub async fn delete_response(
        &self,
        admission: AdmissionId,
        session: SessionId,
    ) -> Result<bool> {
        let inserted = response_deletion::Entity::insert(response_deletion::ActiveModel {
            admission_id: Set(admission.to_string()),
            session_id: Set(session.to_string()),
            deleted_at: Set(now_ms()),
        })
        .exec_without_returning(self.writer())
        .await;
        match inserted {
            Ok(_) => Ok(true),
            Err(e) if is_unique_violation(&e) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the response of `admission` was deleted.
    pub async fn response_deleted(&self, admission: AdmissionId) -> Result<bool> {
        Ok(response_deletion::Entity::find_by_id(admission.to_string())
            .one(self.reader())
            .await?
            .is_some())
    }
}

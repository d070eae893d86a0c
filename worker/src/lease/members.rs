//! The membership table's calls (segmented discovery, `DISCOVERY=segmented`).

use super::*;

impl LeaseTable {
    /// Segmented discovery: reads the whole membership table (eventually consistent unless
    /// `consistent`). Items that are not members are skipped.
    pub async fn scan_members(
        &self,
        page_timeout: Duration,
        consistent: bool,
    ) -> Result<Vec<Member>, CallError> {
        let Some(table) = self.members.clone() else {
            return Ok(Vec::new());
        };
        let mut members = Vec::new();
        self.scan_pages(
            "member_scan",
            &table,
            page_timeout,
            consistent,
            None,
            |raw| {
                members.extend(Member::from_item(raw));
            },
        )
        .await?;
        Ok(members)
    }

    /// Segmented discovery: writes this worker's membership item (one `UpdateItem`).
    pub async fn heartbeat(&self, member: &Member, timeout: Duration) -> Result<(), CallError> {
        let Some(table) = self.members.clone() else {
            return Ok(());
        };
        let call = async {
            lease_table::members::heartbeat(&self.client, &table, member, lease_table::now_ms())
                .await
                .map(Outcome::Done)
                .map_err(|e| member_error("member_put", &e))
        };
        self.timed("member_put", timeout, call).await.map(|_| ())
    }

    /// Segmented discovery: deletes a member gone for long, if it still expires at
    /// `expires_at` (one conditional `DeleteItem`).
    pub async fn forget_member(
        &self,
        owner_id: &str,
        expires_at: i64,
        timeout: Duration,
    ) -> Result<(), CallError> {
        let Some(table) = self.members.clone() else {
            return Ok(());
        };
        let call = async {
            lease_table::members::forget(&self.client, &table, owner_id, expires_at)
                .await
                .map(Outcome::Done)
                .map_err(|e| member_error("member_delete", &e))
        };
        self.timed("member_delete", timeout, call).await.map(|_| ())
    }
}

/// A membership call's failure as the worker reports it.
fn member_error<E, R>(op: &'static str, e: &aws_sdk_dynamodb::error::SdkError<E, R>) -> OpError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    OpError {
        op,
        stream_id: String::new(),
        kind: ops::error_kind(e.code()),
        message: lease_table::error_text(e),
    }
}

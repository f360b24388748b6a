
/// The most `spec.size` may be: the validating webhook refuses more.
pub const MAX_SIZE: i32 = 10;

/// Validation (validating webhook, on create and update): what the CRD's
/// schema cannot say. `req.old_object` is set on update.
pub fn validate(req: &AdmissionRequest<{{kind}}>) -> Verdict {
    let Some(obj) = &req.object else {
        return Verdict::allow();
    };
    match obj.spec.size {
        Some(n) if n > MAX_SIZE => Verdict::deny(format!(
            "spec.size: {n} is more than {MAX_SIZE}, the most this operator runs"
        )),
        _ => Verdict::allow(),
    }
}


/// Defaulting (mutating webhook, on create and update): fill in what was
/// left out. The server answers with the JSONPatch from the request's
/// object to `obj`.
pub fn default(_req: &AdmissionRequest<{{kind}}>, obj: &mut {{kind}}) -> Verdict {
    if obj.spec.size.is_none() {
        obj.spec.size = Some(1);
    }
    Verdict::allow()
}

package accessrules

// NormalPath is normalPath: whether Allow would decide on path at all.
func NormalPath(path []byte) bool { return normalPath(path) }

// Decide is Allow without either decision cache: Casbin decides every call.
func (e *Enforcer) Decide(subjects []string, method, path []byte) bool {
	return e.decide(subjects, method, path, false)
}

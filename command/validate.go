package command

// jobFacts is what `nops validate` learned of the job declared in one file:
// from Nomad's parse when Nomad is reachable (Source "nomad"), else from the
// literal values of the file's HCL (Source "syntax"), in which case a meta
// value that uses a variable or a function is listed in Unresolved instead
// of Meta.
type jobFacts struct {
	Source        string
	ID            string
	Namespace     string
	Type          string
	Parameterized bool
	Meta          map[string]string
	Unresolved    []string
}

// checkMetaKeys returns the problems of the nops_* meta keys of one job
// (SPEC section 2), each naming the key and the value; the caller prefixes
// the file.
//
// This is the extension point of `nops validate` for the meta-key rules,
// which belong to package reconcile/meta so that the CLI and detection judge
// a job alike: call it from here. Until then it finds no problem, and
// validate reports the files' syntax and Nomad parse errors only.
func checkMetaKeys(job *jobFacts) []string {
	_ = job
	return nil
}

package fsm

import (
	"fmt"
	"slices"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/nops-dev/nops/structs"
)

// Tables of the ACL objects.
const (
	TableACLPolicies     = "acl_policies"
	TableACLRoles        = "acl_roles"
	TableACLTokens       = "acl_tokens"
	TableACLAuthMethods  = "acl_auth_methods"
	TableACLBindingRules = "acl_binding_rules"
	TableACLMeta         = "acl_meta"
)

// EventKindACL is the kind of the audit events of ACL changes. They name
// the object and who changed it, never a secret.
const EventKindACL = "acl"

// aclMetaKey is the key of the one row of TableACLMeta.
const aclMetaKey = "acl"

// aclMetaRow holds the ACL system's counters.
type aclMetaRow struct {
	Key string
	// BootstrapIndex is the index of the entry that created the first
	// management token; 0 until then.
	BootstrapIndex uint64
	// ModifyIndex is the index of the last change of any ACL object, so
	// that a server can tell when its compiled ACLs are stale.
	ModifyIndex uint64
}

func addACLTables(tables map[string]*memdb.TableSchema) {
	tables[TableACLPolicies] = keyed(TableACLPolicies, "Name")
	tables[TableACLRoles] = keyed(TableACLRoles, "Name")
	tables[TableACLAuthMethods] = keyed(TableACLAuthMethods, "Name")
	tables[TableACLBindingRules] = keyed(TableACLBindingRules, "ID")
	tables[TableACLMeta] = keyed(TableACLMeta, "Key")
	tables[TableACLTokens] = &memdb.TableSchema{Name: TableACLTokens, Indexes: map[string]*memdb.IndexSchema{
		"id":     {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "AccessorID"}},
		"secret": {Name: "secret", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "SecretHash"}},
	}}
}

// aclWriter applies the requests that change ACL objects, through the
// entry's writer: every change is recorded in the ACL counters and in an
// audit event, in the entry's transaction.
type aclWriter struct{ *writer }

// apply applies a request of type t if it is an ACL request; ok is false
// for any other type.
func (w aclWriter) apply(t structs.MessageType, buf []byte) (ok bool, err error) {
	switch t {
	case structs.ACLPolicyUpsertRequestType:
		return true, applyMsg(buf, w.aclPolicyUpsert)
	case structs.ACLPolicyDeleteRequestType:
		return true, applyMsg(buf, func(r *structs.ACLDeleteRequest) error { return w.aclDelete(r, TableACLPolicies, "policy") })
	case structs.ACLRoleUpsertRequestType:
		return true, applyMsg(buf, w.aclRoleUpsert)
	case structs.ACLRoleDeleteRequestType:
		return true, applyMsg(buf, func(r *structs.ACLDeleteRequest) error { return w.aclDelete(r, TableACLRoles, "role") })
	case structs.ACLTokenUpsertRequestType:
		return true, applyMsg(buf, w.aclTokenUpsert)
	case structs.ACLTokenDeleteRequestType:
		return true, applyMsg(buf, func(r *structs.ACLDeleteRequest) error { return w.aclDelete(r, TableACLTokens, "token") })
	case structs.ACLTokenBootstrapRequestType:
		return true, applyMsg(buf, w.aclTokenBootstrap)
	case structs.ACLAuthMethodUpsertRequestType:
		return true, applyMsg(buf, w.aclAuthMethodUpsert)
	case structs.ACLAuthMethodDeleteRequestType:
		return true, applyMsg(buf, func(r *structs.ACLDeleteRequest) error { return w.aclDelete(r, TableACLAuthMethods, "auth-method") })
	case structs.ACLBindingRuleUpsertRequestType:
		return true, applyMsg(buf, w.aclBindingRuleUpsert)
	case structs.ACLBindingRuleDeleteRequestType:
		return true, applyMsg(buf, func(r *structs.ACLDeleteRequest) error { return w.aclDelete(r, TableACLBindingRules, "binding-rule") })
	}
	return false, nil
}

// aclTouch records an ACL change in the ACL counters.
func (w aclWriter) aclTouch(boot uint64) error {
	m := aclMetaTxn(w.reads)
	m.ModifyIndex = w.index
	if boot > 0 {
		m.BootstrapIndex = boot
	}
	return w.put(TableACLMeta, &m)
}

func aclMetaTxn(txn lookup) aclMetaRow {
	raw, err := txn.First(TableACLMeta, "id", aclMetaKey)
	if err != nil || raw == nil {
		return aclMetaRow{Key: aclMetaKey}
	}
	return *raw.(*aclMetaRow)
}

func (w aclWriter) aclEvent(m structs.WriteMeta, object, to, msg string) error {
	if err := w.aclTouch(0); err != nil {
		return err
	}
	return w.event(m, structs.Event{Kind: EventKindACL, Object: object, To: to, Message: msg})
}

func (w aclWriter) exists(table, key string) (any, error) {
	raw, err := w.first(table, key)
	if err != nil {
		return nil, fmt.Errorf("%s lookup: %w", table, err)
	}
	return raw, nil
}

func upsertAction(old any) string {
	if old == nil {
		return "created"
	}
	return "updated"
}

func (w aclWriter) aclPolicyUpsert(req *structs.ACLPolicyUpsertRequest) error {
	p := req.Policy
	if p == nil || p.Name == "" {
		return invalid("an ACL policy needs a name")
	}
	old, err := w.exists(TableACLPolicies, p.Name)
	if err != nil {
		return err
	}
	c := *p
	c.CreateIndex, c.ModifyIndex, c.CreatedAt, c.UpdatedAt = w.index, w.index, req.Time, req.Time
	if old != nil {
		o := old.(*structs.ACLPolicy)
		c.CreateIndex, c.CreatedAt = o.CreateIndex, o.CreatedAt
	}
	if err := w.put(TableACLPolicies, &c); err != nil {
		return err
	}
	return w.aclEvent(req.WriteMeta, "acl-policy/"+c.Name, upsertAction(old), "ACL policy "+c.Name+" "+upsertAction(old))
}

func (w aclWriter) aclRoleUpsert(req *structs.ACLRoleUpsertRequest) error {
	r := req.Role
	if r == nil || r.Name == "" {
		return invalid("an ACL role needs a name")
	}
	old, err := w.exists(TableACLRoles, r.Name)
	if err != nil {
		return err
	}
	if old != nil && req.Create {
		return conflict("ACL role %q already exists", r.Name)
	}
	if old == nil && !req.Create {
		return notFound("ACL role %q", r.Name)
	}
	c := *r
	c.Policies = slices.Clone(r.Policies)
	c.CreateIndex, c.ModifyIndex, c.CreatedAt, c.UpdatedAt = w.index, w.index, req.Time, req.Time
	if old != nil {
		o := old.(*structs.ACLRole)
		c.CreateIndex, c.CreatedAt = o.CreateIndex, o.CreatedAt
	}
	if err := w.put(TableACLRoles, &c); err != nil {
		return err
	}
	return w.aclEvent(req.WriteMeta, "acl-role/"+c.Name, upsertAction(old), "ACL role "+c.Name+" "+upsertAction(old))
}

func (w aclWriter) checkToken(t *structs.ACLToken) error {
	if t == nil || t.AccessorID == "" || t.SecretHash == "" {
		return invalid("an ACL token needs an accessor ID and a secret hash")
	}
	if t.Type != structs.ACLClientToken && t.Type != structs.ACLManagementToken {
		return invalid("ACL token type must be client or management, not %q", t.Type)
	}
	return nil
}

func (w aclWriter) aclTokenUpsert(req *structs.ACLTokenUpsertRequest) error {
	t := req.Token
	if err := w.checkToken(t); err != nil {
		return err
	}
	old, err := w.exists(TableACLTokens, t.AccessorID)
	if err != nil {
		return err
	}
	if old != nil && req.Create {
		return conflict("ACL token %s already exists", t.AccessorID)
	}
	if old == nil && !req.Create {
		return notFound("ACL token %s", t.AccessorID)
	}
	c := *t
	c.Policies, c.Roles = slices.Clone(t.Policies), slices.Clone(t.Roles)
	c.CreateIndex, c.ModifyIndex, c.CreateTime = w.index, w.index, req.Time
	if old != nil {
		o := old.(*structs.ACLToken)
		// An update never changes the secret, the creation or the
		// method that issued the token.
		c.SecretHash, c.CreateIndex, c.CreateTime, c.AuthMethod = o.SecretHash, o.CreateIndex, o.CreateTime, o.AuthMethod
	} else if raw, err := w.txn.First(TableACLTokens, "secret", c.SecretHash); err != nil {
		return fmt.Errorf("token lookup: %w", err)
	} else if raw != nil {
		return conflict("an ACL token with this secret already exists")
	}
	if err := w.put(TableACLTokens, &c); err != nil {
		return err
	}
	return w.aclEvent(req.WriteMeta, "acl-token/"+c.AccessorID, upsertAction(old),
		fmt.Sprintf("ACL token %s (%s) %s", c.AccessorID, c.Name, upsertAction(old)))
}

func (w aclWriter) aclTokenBootstrap(req *structs.ACLTokenBootstrapRequest) error {
	t := req.Token
	if err := w.checkToken(t); err != nil {
		return err
	}
	if t.Type != structs.ACLManagementToken {
		return invalid("the bootstrap token must be a management token")
	}
	m := aclMetaTxn(w.reads)
	if m.BootstrapIndex != 0 && req.ResetIndex != m.BootstrapIndex {
		return conflict("ACL bootstrap already done (reset index: %d)", m.BootstrapIndex)
	}
	if raw, err := w.txn.First(TableACLTokens, "secret", t.SecretHash); err != nil {
		return fmt.Errorf("token lookup: %w", err)
	} else if raw != nil {
		return conflict("an ACL token with this secret already exists")
	}
	c := *t
	c.CreateIndex, c.ModifyIndex, c.CreateTime = w.index, w.index, req.Time
	if err := w.put(TableACLTokens, &c); err != nil {
		return err
	}
	if err := w.aclTouch(w.index); err != nil {
		return err
	}
	return w.event(req.WriteMeta, structs.Event{Kind: EventKindACL, Object: "acl-token/" + c.AccessorID, To: "bootstrap",
		Message: "ACL bootstrap: management token " + c.AccessorID + " created"})
}

func (w aclWriter) aclAuthMethodUpsert(req *structs.ACLAuthMethodUpsertRequest) error {
	m := req.Method
	if m == nil || m.Name == "" {
		return invalid("an auth method needs a name")
	}
	if m.Type != structs.ACLAuthMethodOIDC && m.Type != structs.ACLAuthMethodJWT {
		return invalid("auth method type must be oidc or jwt, not %q", m.Type)
	}
	old, err := w.exists(TableACLAuthMethods, m.Name)
	if err != nil {
		return err
	}
	c := *m
	if m.Config != nil {
		cfg := *m.Config
		c.Config = &cfg
	}
	c.CreateIndex, c.ModifyIndex, c.CreatedAt, c.UpdatedAt = w.index, w.index, req.Time, req.Time
	if old != nil {
		o := old.(*structs.ACLAuthMethod)
		c.CreateIndex, c.CreatedAt = o.CreateIndex, o.CreatedAt
	}
	if c.Default {
		// One default method: this one replaces any other.
		it, err := w.txn.Get(TableACLAuthMethods, "id")
		if err != nil {
			return fmt.Errorf("auth methods: %w", err)
		}
		var others []*structs.ACLAuthMethod
		for raw := it.Next(); raw != nil; raw = it.Next() {
			if o := raw.(*structs.ACLAuthMethod); o.Default && o.Name != c.Name {
				others = append(others, o)
			}
		}
		for _, o := range others {
			oc := *o
			oc.Default, oc.ModifyIndex = false, w.index
			if err := w.put(TableACLAuthMethods, &oc); err != nil {
				return err
			}
		}
	}
	if err := w.put(TableACLAuthMethods, &c); err != nil {
		return err
	}
	return w.aclEvent(req.WriteMeta, "acl-auth-method/"+c.Name, upsertAction(old), "auth method "+c.Name+" "+upsertAction(old))
}

func (w aclWriter) aclBindingRuleUpsert(req *structs.ACLBindingRuleUpsertRequest) error {
	r := req.Rule
	if r == nil || r.ID == "" || r.AuthMethod == "" {
		return invalid("a binding rule needs an ID and an auth method")
	}
	switch r.BindType {
	case structs.ACLBindTypePolicy, structs.ACLBindTypeRole:
		if r.BindName == "" {
			return invalid("a binding rule of type %s needs a bind name", r.BindType)
		}
	case structs.ACLBindTypeManagement:
	default:
		return invalid("bind type must be policy, role or management, not %q", r.BindType)
	}
	if raw, err := w.exists(TableACLAuthMethods, r.AuthMethod); err != nil {
		return err
	} else if raw == nil {
		return notFound("auth method %q", r.AuthMethod)
	}
	old, err := w.exists(TableACLBindingRules, r.ID)
	if err != nil {
		return err
	}
	if old != nil && req.Create {
		return conflict("binding rule %s already exists", r.ID)
	}
	if old == nil && !req.Create {
		return notFound("binding rule %s", r.ID)
	}
	c := *r
	c.CreateIndex, c.ModifyIndex, c.CreatedAt, c.UpdatedAt = w.index, w.index, req.Time, req.Time
	if old != nil {
		o := old.(*structs.ACLBindingRule)
		c.CreateIndex, c.CreatedAt = o.CreateIndex, o.CreatedAt
	}
	if err := w.put(TableACLBindingRules, &c); err != nil {
		return err
	}
	return w.aclEvent(req.WriteMeta, "acl-binding-rule/"+c.ID, upsertAction(old), "binding rule "+c.ID+" "+upsertAction(old))
}

// aclDelete deletes objects of one table by key, all or none.
func (w aclWriter) aclDelete(req *structs.ACLDeleteRequest, table, what string) error {
	if len(req.Names) == 0 {
		return invalid("delete %s: no names given", what)
	}
	var found []any
	for _, n := range req.Names {
		raw, err := w.exists(table, n)
		if err != nil {
			return err
		}
		if raw == nil {
			if req.IgnoreMissing {
				continue
			}
			return notFound("%s %q", what, n)
		}
		found = append(found, raw)
	}
	if len(found) == 0 {
		return nil
	}
	for _, raw := range found {
		if err := w.delete(table, raw); err != nil {
			return fmt.Errorf("delete %s: %w", what, err)
		}
		name := aclKey(raw)
		if err := w.aclEvent(req.WriteMeta, "acl-"+what+"/"+name, "deleted", what+" "+name+" deleted"); err != nil {
			return err
		}
	}
	if table == TableACLAuthMethods {
		// The binding rules of a deleted method go with it.
		for _, raw := range found {
			name := raw.(*structs.ACLAuthMethod).Name
			it, err := w.txn.Get(TableACLBindingRules, "id")
			if err != nil {
				return fmt.Errorf("binding rules: %w", err)
			}
			var rules []any
			for r := it.Next(); r != nil; r = it.Next() {
				if r.(*structs.ACLBindingRule).AuthMethod == name {
					rules = append(rules, r)
				}
			}
			for _, r := range rules {
				if err := w.delete(TableACLBindingRules, r); err != nil {
					return fmt.Errorf("delete binding rule: %w", err)
				}
			}
		}
	}
	return nil
}

func aclKey(raw any) string {
	switch o := raw.(type) {
	case *structs.ACLPolicy:
		return o.Name
	case *structs.ACLRole:
		return o.Name
	case *structs.ACLToken:
		return o.AccessorID
	case *structs.ACLAuthMethod:
		return o.Name
	case *structs.ACLBindingRule:
		return o.ID
	}
	return ""
}

// ACLState answers the reads of the ACL objects, each from a read
// transaction of its own, as StateStore does the others.
type ACLState struct {
	db *memdb.MemDB
}

// ACL returns the reads of the ACL objects.
func (s *StateStore) ACL() ACLState { return ACLState{db: s.db} }

// Index returns the index of the last change of any ACL object.
func (s ACLState) Index() uint64 { return aclMetaTxn(s.db.Txn(false)).ModifyIndex }

// BootstrapIndex returns the index of the ACL bootstrap, 0 before it.
func (s ACLState) BootstrapIndex() uint64 {
	return aclMetaTxn(s.db.Txn(false)).BootstrapIndex
}

// Policy returns one policy, or nil.
func (s ACLState) Policy(name string) (*structs.ACLPolicy, error) {
	return first[structs.ACLPolicy](s.db.Txn(false), TableACLPolicies, name)
}

// Policies returns every policy, by name.
func (s ACLState) Policies() ([]*structs.ACLPolicy, error) {
	return list[structs.ACLPolicy](s.db.Txn(false), TableACLPolicies)
}

// Role returns one role, or nil.
func (s ACLState) Role(name string) (*structs.ACLRole, error) {
	r, err := first[structs.ACLRole](s.db.Txn(false), TableACLRoles, name)
	if r != nil {
		r.Policies = slices.Clone(r.Policies)
	}
	return r, err
}

// Roles returns every role, by name.
func (s ACLState) Roles() ([]*structs.ACLRole, error) {
	out, err := list[structs.ACLRole](s.db.Txn(false), TableACLRoles)
	for _, r := range out {
		r.Policies = slices.Clone(r.Policies)
	}
	return out, err
}

// Token returns one token by accessor ID, or nil.
func (s ACLState) Token(accessorID string) (*structs.ACLToken, error) {
	return copyToken(first[structs.ACLToken](s.db.Txn(false), TableACLTokens, accessorID))
}

// TokenBySecretHash returns the token whose secret has this hash, or
// nil.
func (s ACLState) TokenBySecretHash(hash string) (*structs.ACLToken, error) {
	raw, err := s.db.Txn(false).First(TableACLTokens, "secret", hash)
	if err != nil {
		return nil, fmt.Errorf("token lookup: %w", err)
	}
	if raw == nil {
		return nil, nil
	}
	c := *raw.(*structs.ACLToken)
	return copyToken(&c, nil)
}

func copyToken(t *structs.ACLToken, err error) (*structs.ACLToken, error) {
	if t != nil {
		t.Policies, t.Roles = slices.Clone(t.Policies), slices.Clone(t.Roles)
	}
	return t, err
}

// Tokens returns every token, by accessor ID.
func (s ACLState) Tokens() ([]*structs.ACLToken, error) {
	out, err := list[structs.ACLToken](s.db.Txn(false), TableACLTokens)
	for _, t := range out {
		_, _ = copyToken(t, nil)
	}
	return out, err
}

// AuthMethod returns one auth method, or nil.
func (s ACLState) AuthMethod(name string) (*structs.ACLAuthMethod, error) {
	m, err := first[structs.ACLAuthMethod](s.db.Txn(false), TableACLAuthMethods, name)
	if m != nil && m.Config != nil {
		cfg := *m.Config
		m.Config = &cfg
	}
	return m, err
}

// AuthMethods returns every auth method, by name.
func (s ACLState) AuthMethods() ([]*structs.ACLAuthMethod, error) {
	out, err := list[structs.ACLAuthMethod](s.db.Txn(false), TableACLAuthMethods)
	for _, m := range out {
		if m.Config != nil {
			cfg := *m.Config
			m.Config = &cfg
		}
	}
	return out, err
}

// BindingRule returns one binding rule, or nil.
func (s ACLState) BindingRule(id string) (*structs.ACLBindingRule, error) {
	return first[structs.ACLBindingRule](s.db.Txn(false), TableACLBindingRules, id)
}

// BindingRules returns every binding rule, by ID.
func (s ACLState) BindingRules() ([]*structs.ACLBindingRule, error) {
	return list[structs.ACLBindingRule](s.db.Txn(false), TableACLBindingRules)
}

package tenants

import (
	"context"
	"time"

	"tollgate/infra/functionstore"
)

// Function is one of a tenant's WebAssembly filters (proxy-wasm), known by name, with the
// versions uploaded under that name. A route runs one version, named by its sha256
// (FunctionRef.SHA256); uploading a new version moves no route.
type Function struct {
	Name string `json:"name" readonly:"true"`
	// Version, SHA256, Size, CreatedAt and CreatedBy describe the current version: the
	// last one uploaded, the one a route that names the function without a digest gets.
	Version   int64     `json:"version" readonly:"true" doc:"The current version's number, 1 for the first upload."`
	SHA256    string    `json:"sha256" readonly:"true" doc:"Hex SHA-256 of the current version's module."`
	Size      int64     `json:"size" readonly:"true" doc:"The current version's module, bytes."`
	CreatedAt time.Time `json:"created_at" readonly:"true" doc:"When the current version was uploaded."`
	CreatedBy string    `json:"created_by" readonly:"true" doc:"Who uploaded the current version."`
	// Routes are the ids of the tenant's routes that run any version of the function.
	Routes   []string          `json:"routes" readonly:"true" doc:"Ids of the routes that run a version of this function."`
	Versions []FunctionVersion `json:"versions,omitempty" readonly:"true" doc:"Every version, newest first (with ?versions=true)."`
}

// FunctionVersion is one upload of a function.
type FunctionVersion struct {
	Version   int64     `json:"version"`
	SHA256    string    `json:"sha256"`
	Size      int64     `json:"size"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by"`
	// Routes are the ids of the routes that run this version.
	Routes []string `json:"routes"`
}

// FunctionService keeps tenants' functions and their modules.
type FunctionService interface {
	// PutFunction stores module as the new current version of the tenant's function name,
	// creating the function when the tenant has none by that name. A module equal to the
	// current version's adds no version. EValidation (name; past the plan's functions or
	// function_bytes), ENotFound (tenant). The caller has checked the module is Wasm that
	// fits the ABI.
	PutFunction(ctx context.Context, tenantID, name string, module []byte, createdBy string) (*Function, error)
	// FindFunction: ENotFound. versions fills Versions.
	FindFunction(ctx context.Context, tenantID, name string, versions bool) (*Function, error)
	// ListFunctions returns the tenant's functions by name (a plan allows at most
	// MaxResources.Functions, so there are no pages).
	ListFunctions(ctx context.Context, tenantID string) ([]*Function, error)
	// FunctionModule returns the module of version sha256 of the function ("" for the
	// current one): ENotFound.
	FunctionModule(ctx context.Context, tenantID, name, sha256 string) ([]byte, error)
	// DeleteFunction removes the function and its versions: ENotFound, EConflict while a
	// route runs one of its versions. The object store's copy of a module no tenant names
	// any more is left to the store's sweep.
	DeleteFunction(ctx context.Context, tenantID, name string) error
	// FunctionDigests returns up to limit digests of every tenant's modules, in order,
	// after the digest after ("" from the start): what the object store must hold.
	FunctionDigests(ctx context.Context, after string, limit int) ([]string, error)
	// ModuleByDigest returns a module of any tenant by its digest: ENotFound.
	ModuleByDigest(ctx context.Context, sha256 string) ([]byte, error)
}

// FunctionLog is one line a function logged at an edge, or the reason the edge gave up
// on it: the log stream's wire type (infra/functionstore).
type FunctionLog = functionstore.LogLine

// MaxFunctionLogs is the most log lines one read returns: what the stream keeps per
// tenant.
const MaxFunctionLogs = functionstore.LogsPerTenant

package openapi

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

// ParseDocs reads the doc comments of the types, and of their fields,
// declared in the Go files (tests excluded) of each directory, keyed as
// Builder.Docs wants: "importpath.Type" and "importpath.Type.Field".
// dirs maps an import path to its directory.
func ParseDocs(dirs map[string]string) (map[string]string, error) {
	docs := map[string]string{}
	fset := token.NewFileSet()
	for pkg, dir := range dirs {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				return nil, err
			}
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.TYPE {
					continue
				}
				for _, sp := range gd.Specs {
					ts := sp.(*ast.TypeSpec)
					doc := ts.Doc
					if doc == nil && len(gd.Specs) == 1 {
						doc = gd.Doc
					}
					put(docs, pkg+"."+ts.Name.Name, doc)
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					for _, fl := range st.Fields.List {
						doc := fl.Doc
						if doc == nil {
							doc = fl.Comment
						}
						for _, n := range fl.Names {
							put(docs, pkg+"."+ts.Name.Name+"."+n.Name, doc)
						}
					}
				}
			}
		}
	}
	return docs, nil
}

// put keeps a comment as one line of prose.
func put(docs map[string]string, key string, cg *ast.CommentGroup) {
	if cg == nil {
		return
	}
	if text := strings.Join(strings.Fields(cg.Text()), " "); text != "" {
		docs[key] = text
	}
}
